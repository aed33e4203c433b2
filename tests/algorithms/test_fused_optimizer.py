"""`--fused-optimizer`: every algorithm's optimisers take torch's fused kernel, train as torch's default does up
to rounding, and resume exactly; what cannot be fused is refused."""
import pytest
import torch
from test_algorithms_train import MATRIX, build, load, save, train

from dgmoe.algorithms.base import use_fused_kernel
from dgmoe.engine import train as train_run

# one backbone per algorithm (the optimisers are the algorithm's, whatever the backbone); by default those with
# Adam (ERM), Adam pairs (DANN), SGD (Transfer), a saved non-optimiser state (Fish) and an inner optimiser
# (MLDG); every algorithm with -m slow
ONE_EACH = list({name: (name, backbone) for name, backbone in reversed(MATRIX)}.values())
DEFAULT = ("ERM", "DANN", "Transfer", "Fish", "MLDG")
CASES = [pytest.param(n, b, marks=() if n in DEFAULT else pytest.mark.slow) for n, b in ONE_EACH]


def _parameters(alg):
    return torch.cat([p.detach().flatten() for p in alg.parameters()])


@pytest.mark.parametrize("name,backbone", CASES)
def test_every_algorithm_trains_on_the_fused_kernel_as_on_the_default_and_resumes_exactly(name, backbone):
    default, fused = build(name, backbone), build(name, backbone)
    fused.use_fused_optimizers()
    optimizers = [o for o in fused.optimizers().values() if isinstance(o, torch.optim.Optimizer)]
    assert optimizers and all(group["fused"] for o in optimizers for group in o.param_groups)
    start = _parameters(default)
    train(default, 3), train(fused, 3)
    # The same update, rounded differently: the runs stay within a few percent of what three steps moved the
    # weights (0.00005-0.2%; 1-2% for Fishr and IGA, whose penalties amplify rounding). A kernel that lost the
    # learning rate, a moment or the weight decay would be as far off as the step itself.
    moved, apart = (_parameters(default) - start).norm(), (_parameters(fused) - _parameters(default)).norm()
    assert apart <= 0.05 * moved, (apart, moved)
    blob = save(fused)
    resumed = build(name, backbone, seed=1)
    resumed.use_fused_optimizers()
    load(resumed, blob)
    assert train(fused, 2, start=3) == train(resumed, 2, start=3)
    assert torch.equal(_parameters(fused), _parameters(resumed))


def test_what_has_no_fused_kernel_or_has_stepped_is_refused():
    param = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError, match="RMSprop has no fused kernel.*Adam, AdamW, SGD"):
        use_fused_kernel(torch.optim.RMSprop([param]))
    optimizer = torch.optim.Adam([param])
    param.grad = torch.ones(2)
    optimizer.step()
    with pytest.raises(RuntimeError, match="already stepped"):
        use_fused_kernel(optimizer)
    fresh = torch.optim.SGD([param], lr=0.1)
    use_fused_kernel(fresh), use_fused_kernel(fresh)  # idempotent
    assert fresh.defaults["fused"] and fresh.param_groups[0]["foreach"] is None


def test_a_run_with_fused_optimizers_records_the_setting_and_extends_exactly(tmp_path):
    tiny = dict(dataset="RotatedMNIST", model="vit_micro_patch7_28", model_kwargs={"depth": 1}, n_per_domain=40,
                checkpoint_freq=2, num_threads=1, progress="none", fused_optimizer=True)
    short = train_run(steps=4, keep_resume=True, output_dir=str(tmp_path / "run"), **tiny)
    longer = train_run(steps=6, extend=True, output_dir=str(tmp_path / "run"), **tiny)
    scratch = train_run(steps=6, output_dir=str(tmp_path / "scratch"), **tiny)
    default = train_run(steps=6, output_dir=str(tmp_path / "default"), **{**tiny, "fused_optimizer": False})
    assert short.records[-1]["args"]["fused_optimizer"] is True
    final = [run.records[-1] for run in (longer, scratch, default)]
    assert final[0]["step"] == final[1]["step"] == 5
    accuracies = [{k: v for k, v in record.items() if k.endswith("_acc")} for record in final]
    assert accuracies[0] == accuracies[1]  # extended on the fused kernel: exactly the 6-step run
    assert final[0]["loss"] == final[1]["loss"]
    assert final[1]["loss"] == pytest.approx(final[2]["loss"], rel=1e-4)  # the default's numbers, up to rounding
