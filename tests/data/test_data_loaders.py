"""Deterministic, resumable training batches and ordered evaluation batches."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from dgmoe.data import ArrayDomain, TrainBatches, class_balanced_weights, eval_loader, train_transform
from dgmoe.data.loaders import EvalBatches
from dgmoe.data.prefetch import BackgroundBatches
from dgmoe.data.transforms import eval_transform


def identity_env(n: int, offset: int = 0, size: int = 6) -> ArrayDomain:
    """Item i has label offset + i and every pixel (offset + i) % 256, so a batch reveals what was drawn."""
    values = (np.arange(n) + offset) % 256
    images = np.broadcast_to(values[:, None, None, None], (n, 3, size, size)).astype(np.uint8)
    return ArrayDomain(images, np.arange(n) + offset)


class MetaEnv(Dataset):
    """A plain Dataset returning (x, y, meta), without `gather`."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i):
        return torch.full((1, 2, 2), i, dtype=torch.uint8), i, {"lat": torch.tensor(float(i)), "region": i % 3}


def make_batches(seed=0, transform=None, **kw) -> TrainBatches:
    envs = [identity_env(50), identity_env(40, offset=100)]
    return TrainBatches(envs, [np.arange(0, 50, 2), np.arange(10, 30)], batch_size=8, seed=seed,
                        transform=transform, **kw)


def same(a, b) -> bool:
    return all(torch.equal(x.x, y.x) and torch.equal(x.y, y.y) for x, y in zip(a, b))


def test_same_step_same_batches_and_steps_differ():
    tb = make_batches(transform=train_transform(6))
    first = tb.batch_at(7)
    assert len(first) == 2 and first[0].x.shape == (8, 3, 6, 6) and first[0].x.dtype == torch.float32
    assert same(first, make_batches(transform=train_transform(6)).batch_at(7))
    assert not same(first, tb.batch_at(8))
    assert not same(first, make_batches(seed=1, transform=train_transform(6)).batch_at(7))


def test_draws_with_replacement_from_the_given_indices_only():
    tb = make_batches()
    ys = [torch.cat([b.y for b in tb.batch_at(s)[:1]]) for s in range(50)]
    drawn = torch.cat(ys)
    assert set(drawn.tolist()) <= set(range(0, 50, 2))
    assert len(set(drawn.tolist())) == 25  # all of them show up over 400 draws
    assert any(len(set(y.tolist())) < 8 for y in ys)  # with replacement: repeats within a batch
    second = torch.cat([tb.batch_at(s)[1].y for s in range(20)])
    assert set(second.tolist()) <= set(range(110, 130))
    raw = tb.batch_at(0)[0]
    assert raw.x.dtype == torch.uint8 and torch.equal(raw.x[:, 0, 0, 0].long(), raw.y)


def test_resume_reproduces_an_uninterrupted_run():
    tb = make_batches(transform=train_transform(6))
    full = list(tb.iter_from(0, 6))
    resumed = list(make_batches(transform=train_transform(6)).iter_from(3, 6))
    assert len(full) == 6 and len(resumed) == 3
    assert all(same(a, b) for a, b in zip(full[3:], resumed))


def test_worker_prefetch_gives_the_same_batches():
    tb = make_batches(transform=train_transform(6))
    prefetched = list(tb.iter_from(2, 7, num_workers=2))
    assert len(prefetched) == 5
    assert all(same(prefetched[k], tb.batch_at(2 + k)) for k in range(5))


def test_domain_ids_key_the_draws():
    a = make_batches().batch_at(0)
    b = make_batches(domain_ids=[5, 6]).batch_at(0)
    assert not torch.equal(a[0].y, b[0].y)
    c = TrainBatches([identity_env(40, offset=100)], [np.arange(10, 30)], 8, 0, domain_ids=[1]).batch_at(0)
    assert torch.equal(c[0].y, a[1].y)  # domain 1 of a two-domain run == the same domain alone with id 1


def test_weights_and_class_balance():
    w = class_balanced_weights([0, 0, 0, 1])
    torch.testing.assert_close(w, torch.tensor([1 / 6, 1 / 6, 1 / 6, 1 / 2], dtype=torch.double))
    weights = [torch.tensor([0.0] * 24 + [1.0], dtype=torch.double), None]
    tb = make_batches(weights=weights)
    assert set(tb.batch_at(3)[0].y.tolist()) == {48}
    with pytest.raises(ValueError, match="one per index"):
        make_batches(weights=[torch.ones(3), None])


def test_metadata_is_collated_generically():
    tb = TrainBatches([MetaEnv()], [np.arange(10)], batch_size=5, seed=0)
    batch = tb.batch_at(0)[0]
    assert set(batch.meta) == {"lat", "region"}
    assert torch.equal(batch.meta["lat"].long(), batch.y) and torch.equal(batch.meta["region"], batch.y % 3)
    env = ArrayDomain(np.zeros((4, 1, 2, 2), np.uint8), [0, 1, 2, 3], meta={"lat": np.array([1.0, 2, 3, 4])})
    assert len(env[2]) == 3 and env[2][2]["lat"].item() == 3.0
    batch = TrainBatches([env], [np.arange(4)], 6, 0).batch_at(1)[0]
    torch.testing.assert_close(batch.meta["lat"], batch.y.double() + 1)


def test_eval_loader_in_order():
    env = identity_env(150)
    idx = np.arange(149, -1, -2)
    batches = list(eval_loader(env, idx, None, batch_size=64))
    assert [len(b.y) for b in batches] == [64, 11]
    assert torch.cat([b.y for b in batches]).tolist() == idx.tolist()
    all_items = list(eval_loader(env, None, lambda x, generator=None: x.float(), batch_size=100))
    assert torch.cat([b.y for b in all_items]).tolist() == list(range(150))
    assert all_items[0].x.dtype == torch.float32
    workers = list(eval_loader(env, idx, None, batch_size=64, num_workers=2))
    assert all(torch.equal(a.y, b.y) for a, b in zip(batches, workers))


def test_eval_batches_transformed_on_the_device_equal_the_loader_s():
    """With `device`, uint8 images travel and the transform runs after the copy: the same batches."""
    env = ArrayDomain(torch.randint(0, 255, (40, 3, 8, 8), dtype=torch.uint8).numpy(), list(range(40)))
    parts = [(env, np.arange(0, 40, 3)), (env, np.arange(1, 40, 2))]
    for workers in (0, 2):
        plain = list(EvalBatches(eval_transform(8), 8, workers)(parts))
        on_device = list(EvalBatches(eval_transform(8), 8, workers, device="cpu")(parts))
        assert [p for p, _ in plain] == [p for p, _ in on_device] == [0, 0, 1, 1, 1]
        for (_, a), (_, b) in zip(plain, on_device):
            assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and a.x.dtype == torch.float32


def test_bad_arguments():
    with pytest.raises(ValueError, match="2 environments but 1 index lists"):
        TrainBatches([identity_env(3), identity_env(3)], [[0]], 4, 0)
    with pytest.raises(ValueError, match="no items"):
        TrainBatches([identity_env(3)], [[]], 4, 0)


def test_device_path_matches_cpu_batches():
    tb = make_batches(transform=train_transform(6))
    on_device = make_batches(transform=train_transform(6), device="cpu")
    assert all(same(tb.batch_at(s), on_device.batch_at(s)) for s in range(3))
    prefetched = list(on_device.iter_from(0, 3, num_workers=2))  # raw uint8 in workers, augmented here
    assert all(same(prefetched[s], tb.batch_at(s)) for s in range(3))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_augmentation_matches_cpu():
    tb = make_batches(transform=train_transform(6))
    cuda = make_batches(transform=train_transform(6), device="cuda")
    for a, b in zip(tb.batch_at(4), cuda.batch_at(4)):
        assert b.x.is_cuda
        torch.testing.assert_close(b.x.cpu(), a.x, atol=1e-4, rtol=0)
        assert torch.equal(b.y.cpu(), a.y)


def test_background_batches_are_the_in_process_ones_with_and_without_workers():
    tb = make_batches(transform=train_transform(6), device="cpu")
    for workers in (0, 2):
        stream = tb.iter_from(1, 5, num_workers=workers, background=True)
        assert isinstance(stream, BackgroundBatches)
        assert all(same(got, tb.batch_at(s)) for s, got in zip(range(1, 5), stream))
        with pytest.raises(StopIteration):
            next(stream)


def test_background_batches_raise_the_source_error_at_its_step_and_stop_when_closed():
    def source():
        yield from range(3)
        raise OSError("disk gone")

    stream = BackgroundBatches(source(), depth=2)
    assert [next(stream) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(OSError, match="disk gone"):
        next(stream)
    endless = BackgroundBatches(iter(int, 1), depth=1)  # an infinite source, like the trainer's
    assert next(endless) == 0
    endless.close()
    assert not endless._thread.is_alive()
    with pytest.raises(StopIteration):
        next(endless)
    with pytest.raises(ValueError, match="depth"):
        BackgroundBatches(iter([]), depth=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_background_batches_match_and_never_synchronise():
    """On a GPU the loader runs in a thread on a side stream: the same batches as built in place, and
    neither the thread nor the consumer waits for the device."""
    cuda = make_batches(transform=train_transform(6), device="cuda")
    expected = [cuda.batch_at(s) for s in range(4)]
    stream = cuda.iter_from(0, 4)
    assert isinstance(stream, BackgroundBatches)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = [[b.x * 1 for b in batches] for batches in stream]  # used on the consumer's stream
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for want, have in zip(expected, got):
        for a, b in zip(want, have):
            torch.testing.assert_close(b, a.x, atol=0, rtol=0)


def test_one_augmentation_pass_over_all_domains_equals_one_per_domain():
    tf = train_transform(6)
    tb = make_batches(transform=tf)
    alone = [tf(x, generator=g) for x, _, _, g in tb.draw(3)]  # each domain's batch augmented by itself
    together = tb.batch_at(3)
    assert [len(b) for b in together] == [8, 8]
    for a, b in zip(alone, together):
        torch.testing.assert_close(b.x, a, atol=1e-6, rtol=0)
    per_domain = make_batches(transform=[tf, train_transform(6)])  # different transforms: one pass each
    assert all(torch.equal(a, b.x) for a, b in zip(alone, per_domain.batch_at(3)))
