"""The CUB-DG loader on a tiny fixture written in the CUB-200-2011 file format."""
from pathlib import Path

import pytest
import torch
from PIL import Image

from dgmoe.data.cub import CUBDG, read_cub_annotations
from dgmoe.data.errors import DataDirNotFoundError, LayoutError

IMAGES = [  # image_id, relative path, class id (1-based), is_train, (width, height)
    (1, "001.Black_footed_Albatross/Black_Footed_Albatross_0001_1.jpg", 1, 1, (40, 20)),
    (2, "001.Black_footed_Albatross/Black_Footed_Albatross_0002_2.jpg", 1, 0, (30, 30)),
    (3, "002.Laysan_Albatross/Laysan_Albatross_0003_3.jpg", 2, 1, (20, 40)),
]
PARTS = ["back", "left wing", "beak"]
ATTRS = ["has_bill_shape::dagger", "has_bill_shape::hooked", "has_wing_color::blue", "has_wing_color::brown"]


def write_cub_dg(root: Path, domains=("Natural", "Candy", "Mosaic", "Udnie"), ann_dir: str = "CUB_200_2011") -> Path:
    """Write a CUB-DG fixture (root/CUB_200_2011 annotations, root/CUB_DG/<Domain> images); return root."""
    base = root / "CUB_DG"
    ann = root / ann_dir
    (ann / "parts").mkdir(parents=True, exist_ok=True)
    (ann / "attributes").mkdir(parents=True, exist_ok=True)
    # images.txt deliberately out of id order
    (ann / "images.txt").write_text("".join(f"{i} {p}\n" for i, p, *_ in reversed(IMAGES)))
    (ann / "classes.txt").write_text("1 001.Black_footed_Albatross\n2 002.Laysan_Albatross\n")
    (ann / "image_class_labels.txt").write_text("".join(f"{i} {c}\n" for i, _, c, *_ in IMAGES))
    (ann / "train_test_split.txt").write_text("".join(f"{i} {t}\n" for i, _, _, t, _ in IMAGES))
    (ann / "bounding_boxes.txt").write_text("".join(f"{i} 2.0 4.0 {w / 2} {h / 2}\n" for i, *_, (w, h) in IMAGES))
    (ann / "parts" / "parts.txt").write_text("".join(f"{k + 1} {n}\n" for k, n in enumerate(PARTS)))
    locs = []
    for i, *_, (w, h) in IMAGES:
        locs += [f"{i} 1 {w / 2} {h / 2} 1", f"{i} 2 {w / 4} {h / 4} {int(i != 2)}", f"{i} 3 0.0 0.0 0"]
    (ann / "parts" / "part_locs.txt").write_text("\n".join(locs) + "\n")
    (ann / "attributes" / "attributes.txt").write_text("".join(f"{k + 1} {n}\n" for k, n in enumerate(ATTRS)))
    labels = []
    for i, *_ in IMAGES:
        for a in range(1, 5):
            present = int((i + a) % 2 == 0)
            # CUB's file has a few lines with an extra field; the parser must ignore it
            labels.append(f"{i} {a} {present} 3 7.5" + (" 0" if (i, a) == (2, 3) else ""))
    (ann / "attributes" / "image_attribute_labels.txt").write_text("\n".join(labels) + "\n")
    for d, domain in enumerate(domains):
        for i, rel, c, _, (w, h) in IMAGES:
            path = base / domain / rel
            if domain == "Mosaic":
                path = path.with_suffix(".png")  # stylised copies may change the extension
            path.parent.mkdir(parents=True, exist_ok=True)
            size = (w, h) if domain == "Natural" else (64, 64)  # stylised copies may be resized
            Image.new("RGB", size, (40 * d, 10 * i, 100)).save(path)
    return root


def test_annotations_parse(tmp_path):
    write_cub_dg(tmp_path)
    ann = read_cub_annotations(tmp_path / "CUB_200_2011")
    assert ann.image_ids == (1, 2, 3)
    assert ann.paths[2].startswith("002.Laysan")
    assert ann.labels.tolist() == [0, 0, 1]
    assert ann.classes == ("001.Black_footed_Albatross", "002.Laysan_Albatross")
    assert ann.is_train.tolist() == [True, False, True]
    assert ann.part_names == ("back", "left wing", "beak")
    assert ann.part_xy[0, 0].tolist() == [20.0, 10.0]
    assert ann.part_visible.tolist() == [[True, True, False], [True, False, False], [True, True, False]]
    assert torch.allclose(ann.boxes[1], torch.tensor([2.0, 4.0, 15.0, 15.0]))
    assert ann.attribute_names == tuple(ATTRS)
    expected = [[int((i + a) % 2 == 0) for a in range(1, 5)] for i in (1, 2, 3)]
    assert ann.attributes.int().tolist() == expected


def test_explicit_annotation_dir_and_tarball_root_attributes_file(tmp_path):
    write_cub_dg(tmp_path, ann_dir="my_annotations")
    (tmp_path / "my_annotations" / "attributes" / "attributes.txt").rename(tmp_path / "attributes.txt")
    assert read_cub_annotations(tmp_path / "my_annotations").attribute_names == tuple(ATTRS)
    cub = CUBDG(tmp_path, annotations_dir=tmp_path / "my_annotations")
    assert len(cub.annotations) == 3
    # CUB_DG holds only domain folders, so the catalogue's folder dataset can train on it as well
    assert sorted(p.name for p in (tmp_path / "CUB_DG").iterdir()) == ["Candy", "Mosaic", "Natural", "Udnie"]


def test_dataset_domains_items_and_normalised_parts(tmp_path):
    cub = CUBDG(write_cub_dg(tmp_path))
    assert cub.domains == ["Candy", "Mosaic", "Natural", "Udnie"]
    ds = cub.dataset(img_size=16, split="train")
    assert ds.num_classes == 2 and len(ds) == 4
    assert [len(e) for e in ds.environments] == [2, 2, 2, 2]
    x, y, meta = ds[1][1]  # Mosaic, second training image (id 3), a .png on disk
    assert x.dtype == torch.uint8 and x.shape == (3, 16, 16) and y == 1 and int(meta["index"]) == 2
    assert int(x[0, 0, 0]) == 40 * 2 and int(x[1, 0, 0]) == 30
    # normalised by the *Natural* image size although stylised copies are 64x64
    xy, vis = cub.normalized_parts([0, 2])
    assert torch.allclose(xy[:, 0], torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    assert torch.allclose(xy[:, 1], torch.tensor([[0.25, 0.25], [0.25, 0.25]]))
    boxes = cub.normalized_boxes([0])
    assert torch.allclose(boxes, torch.tensor([[2 / 40, 4 / 20, 0.5, 0.5]]))


def test_clear_errors(tmp_path):
    with pytest.raises(DataDirNotFoundError, match="CUB_DG"):
        CUBDG(tmp_path / "nowhere")
    write_cub_dg(tmp_path, domains=("Natural",))
    with pytest.raises(LayoutError, match="Candy"):
        CUBDG(tmp_path, domains=["Candy"])
    (tmp_path / "CUB_DG" / "Natural" / IMAGES[0][1]).unlink()
    cub = CUBDG(tmp_path, with_attributes=False)
    assert cub.annotations.attributes is None
    with pytest.raises(LayoutError, match="image missing.*image id 1"):
        cub.dataset(img_size=8)
    (tmp_path / "CUB_200_2011" / "bounding_boxes.txt").write_text("1 2 3\n")
    with pytest.raises(LayoutError, match="bounding_boxes.txt"):
        read_cub_annotations(tmp_path / "CUB_200_2011")
    with pytest.raises(LayoutError, match="no images.txt"):
        read_cub_annotations(tmp_path / "CUB_DG")


def test_analyze_cub_writes_histograms_and_maps(tmp_path):
    from dgmoe.analysis.pipeline import analyze_cub
    from dgmoe.models import create_model

    torch.manual_seed(0)
    model = create_model("gmoe_tiny_patch16_224", num_classes=2, img_size=28, patch_size=7)
    out = tmp_path / "analysis"
    md = analyze_cub(model, write_cub_dg(tmp_path / "data"), out, domain="Candy", split="all", n_images=3, show=2)
    layers = [p.stem.removeprefix("cub_parts_") for p in sorted(out.glob("cub_parts_*.png"))]
    assert layers, "one part histogram per MoE layer"
    for layer in layers:
        for kind in ("attributes", "routing", "domains"):
            assert (out / f"cub_{kind}_{layer}.png").is_file()
    # 3 images; parts visible: back x3, left wing x2, beak x0 -> 5 visible parts x 9 patches per layer;
    # background: the 4x4 grid's patch centres outside each half-size box
    first = md.split("#### ")[1]
    rows = {line.split("|")[1].strip(): [int(v) for v in line.split("|")[2:-1]]
            for line in first.splitlines() if line.startswith("| ") and not line.startswith("| part")
            and "has_" not in line and "attribute" not in line}
    assert sum(rows["back"]) == 27 and sum(rows["left wing"]) == 18 and sum(rows["beak"]) == 0
    assert "has_bill_shape" in md and "has_wing_color" in md
