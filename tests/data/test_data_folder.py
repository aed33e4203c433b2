"""Folder datasets: DomainBed layout discovery, catalogue checks, decoding and the bad-input errors."""
from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dgmoe.data import (
    DataDirNotFoundError,
    DatasetError,
    EmptyDomainError,
    LayoutError,
    UnknownDatasetError,
    UnreadableImageError,
    get_dataset,
    list_datasets,
)
from dgmoe.data.folder import decode_files, scan_folder

PACS_DOMAINS = ("art_painting", "cartoon", "photo", "sketch")
PACS_CLASSES = ("dog", "elephant", "giraffe", "guitar", "horse", "house", "person")


def colour(d: int, c: int, i: int) -> tuple[int, int, int]:
    return (40 * d + 10, 30 * c + 5, 7 * i)


def make_tree(root: Path, domains=PACS_DOMAINS, classes=PACS_CLASSES, n=2, size=12) -> Path:
    """Solid-colour images whose colour encodes (domain, class, index); PNG and JPEG mixed."""
    for d, dom in enumerate(domains):
        for c, cls in enumerate(classes):
            folder = root / dom / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                ext = "png" if (d + i) % 2 == 0 else "jpg"
                Image.new("RGB", (size + i, size), colour(d, c, i)).save(folder / f"img{i}.{ext}")
    return root


@pytest.fixture
def tiny(tmp_path):
    make_tree(tmp_path / "data" / "ImageFolderRoot", domains=("b_dom", "a_dom"), classes=("zebra", "ant"), n=3)
    return tmp_path / "data" / "ImageFolderRoot"


def test_domains_and_classes_are_sorted_folder_names(tiny):
    ds = get_dataset("ImageFolder", tiny, img_size=8)
    assert ds.domains == ["a_dom", "b_dom"]
    assert ds.classes == ["ant", "zebra"]
    assert [len(e) for e in ds.environments] == [6, 6]
    assert ds.input_shape == (3, 8, 8)
    x, y = ds[0][0]
    assert x.dtype == torch.uint8 and x.shape == (3, 8, 8) and y == 0
    # a_dom (folder index 1 when created) / ant (class index 1 when created) / img0 is the first item
    assert np.abs(x[:, 4, 4].numpy().astype(int) - colour(1, 1, 0)).max() <= 3  # a JPEG
    assert ds[0].labels.tolist() == [0, 0, 0, 1, 1, 1]


def test_decoded_pixels_match_source_colours_for_png_and_jpeg(tmp_path):
    root = make_tree(tmp_path / "PACS", n=2)
    ds = get_dataset("PACS", tmp_path, img_size=6)
    for d in range(4):
        for k in range(len(ds[d])):
            x, y = ds[d][k]
            expected = np.array(colour(d, y, k % 2))
            tol = 0 if (d + k % 2) % 2 == 0 else 3  # JPEG is lossy
            assert np.abs(x[:, 3, 3].numpy().astype(int) - expected).max() <= tol
    assert root.exists()


def test_catalogue_domains_must_match(tmp_path):
    make_tree(tmp_path / "PACS", domains=("art_painting", "cartoon", "photos", "sketch"))
    with pytest.raises(LayoutError) as e:
        get_dataset("PACS", tmp_path, img_size=8)
    msg = str(e.value)
    assert "expected domain folders art_painting, cartoon, photo, sketch" in msg
    assert "missing: photo" in msg and "unexpected: photos" in msg


def test_catalogue_class_count_checked(tmp_path):
    make_tree(tmp_path / "VLCS", domains=("Caltech101", "LabelMe", "SUN09", "VOC2007"), classes=("a", "b"))
    with pytest.raises(LayoutError, match="expected 5 class folders"):
        get_dataset("VLCS", tmp_path, img_size=8)


def test_missing_data_dir_and_dataset_folder(tmp_path):
    with pytest.raises(DataDirNotFoundError, match="PACS needs a data dir"):
        get_dataset("PACS", None, img_size=8)
    with pytest.raises(DataDirNotFoundError, match="does not exist"):
        get_dataset("PACS", tmp_path / "nope", img_size=8)
    (tmp_path / "other").mkdir()
    with pytest.raises(DataDirNotFoundError) as e:
        get_dataset("PACS", tmp_path, img_size=8)
    assert str(tmp_path / "PACS") in str(e.value) and "other" in str(e.value)
    assert "<domain>/<class>/<image>" in str(e.value)


def test_pointing_at_the_dataset_folder_itself_gives_a_hint(tmp_path):
    make_tree(tmp_path / "PACS")
    with pytest.raises(DataDirNotFoundError, match="pass its parent"):
        get_dataset("PACS", tmp_path / "PACS", img_size=8)


def test_domain_without_images(tmp_path):
    make_tree(tmp_path / "PACS")
    for f in (tmp_path / "PACS" / "photo").rglob("*.*"):
        f.unlink()
    with pytest.raises(EmptyDomainError, match="photo contains no images"):
        get_dataset("PACS", tmp_path, img_size=8)


def test_images_directly_in_domain_folder(tmp_path):
    root = tmp_path / "ds"
    (root / "d1").mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(root / "d1" / "x.png")
    make_tree(root, domains=("d2",))
    with pytest.raises(LayoutError, match=r"d1 has no class folders \(found 1 loose image files\)"):
        get_dataset("ImageFolder", root, img_size=4)


def test_unreadable_image_names_the_file(tiny):
    bad = tiny / "a_dom" / "ant" / "broken.jpg"
    bad.write_bytes(b"not a jpeg at all")
    with pytest.raises(UnreadableImageError) as e:
        get_dataset("ImageFolder", tiny, img_size=8)
    assert str(bad) in str(e.value)
    assert isinstance(e.value, DatasetError) and isinstance(e.value, ValueError)


def test_unreadable_image_from_a_worker_process(tiny):
    bad = tiny / "a_dom" / "ant" / "broken.png"
    bad.write_bytes(b"\x89PNG broken")
    paths = [str(bad)] * 200  # two chunks, so the process pool is used
    with pytest.raises(UnreadableImageError, match="broken.png"):
        decode_files(paths, 4, workers=2)


def test_missing_class_in_one_domain_keeps_labels_consistent(tiny, caplog):
    for f in (tiny / "b_dom" / "ant").iterdir():
        f.unlink()
    (tiny / "b_dom" / "ant").rmdir()
    with caplog.at_level(logging.WARNING, logger="dgmoe"):  # a dgmoe line (console and train.log), no UserWarning
        listing = scan_folder(tiny, "custom")
    assert "'b_dom' has no images of class(es) ant" in caplog.text
    assert listing.classes == ("ant", "zebra")
    assert set(listing.labels[1]) == {1}


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(UnknownDatasetError) as e:
        get_dataset("PAC", None)
    msg = str(e.value)
    assert "Did you mean: PACS" in msg and "Valid names:" in msg and "RotatedMNIST" in msg
    assert isinstance(e.value, KeyError) and isinstance(e.value, ValueError)


def test_catalogue_has_gmoes_and_domainbeds_datasets():
    names = set(list_datasets())
    assert {"PACS", "VLCS", "OfficeHome", "TerraIncognita", "DomainNet", "SVIRO", "CUBDG", "RotatedMNIST",
            "ColoredMNIST"} <= names
    from dgmoe.data import get_spec
    assert get_spec("CUBDG").domains == ("Candy", "Mosaic", "Natural", "Udnie")
    assert (get_spec("DomainNet").n_steps, get_spec("DomainNet").checkpoint_freq) == (15001, 1000)
    assert (get_spec("PACS").n_steps, get_spec("PACS").checkpoint_freq) == (5001, 300)
    assert get_spec("RotatedMNIST").checkpoint_freq == 100


def test_subsample_lazy_and_eager_agree(tiny):
    eager = get_dataset("ImageFolder", tiny, img_size=8, n_per_domain=4, seed=3)
    lazy = get_dataset("ImageFolder", tiny, img_size=8, n_per_domain=4, seed=3, decode="lazy")
    assert [len(e) for e in eager.environments] == [4, 4]
    for d in range(2):
        xe, ye, _ = eager[d].gather(range(4))
        xl, yl, _ = lazy[d].gather(range(4))
        assert torch.equal(xe, xl) and torch.equal(ye, yl)
    other = get_dataset("ImageFolder", tiny, img_size=8, n_per_domain=4, seed=4)
    assert any(not np.array_equal(other[d].images, eager[d].images) for d in range(2))


def test_workers_give_identical_arrays(tiny):
    paths = sorted(str(p) for p in tiny.rglob("*.*")) * 30
    np.testing.assert_array_equal(decode_files(paths, 5, workers=0), decode_files(paths, 5, workers=2))


def test_folder_options_rejected(tiny):
    with pytest.raises(TypeError, match="takes no options"):
        get_dataset("ImageFolder", tiny, img_size=8, channels=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get_dataset("ImageFolder", tiny, img_size=8)
