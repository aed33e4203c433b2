"""Write src/dgmoe/data/shifts/imagenet_classes.json, the class facts of the ImageNet distribution-shift suite,
from the public sources that define them (facts only; nothing here is imported by dgmoe):

    git -C <dir> clone https://github.com/mlfoundations/wise-ft        # or the `fetch` tool's snapshots
    git -C <dir> clone https://github.com/hendrycks/imagenet-r
    PYTHONPATH=/work/peers python tests/parity/record_imagenet_shift_classes.py \
        --wise-ft /work/.mirror/mlfoundations+wise-ft/repo --imagenet-r /work/.mirror/hendrycks+imagenet-r/repo

- `wnids`: the 1,000 ImageNet-1k WordNet ids in the class-index order every ImageNet loader uses (sorted; the
  `all_wnids` list of hendrycks/imagenet-r's eval.py);
- `names`: open_clip's `IMAGENET_CLASSNAMES` (the CLIP paper's cleaned class names, zero_shot_metadata.py);
- `imagenet_r` / `imagenet_a`: the ImageNet indices of the 200 classes of ImageNet-R (Hendrycks et al., ICCV
  2021) and ImageNet-A (Hendrycks et al., CVPR 2021), wise-ft's `CLASS_SUBLIST`s (ImageNet-R's is checked
  against hendrycks/imagenet-r's `imagenet_r_wnids`);
- `objectnet`: the 113 ObjectNet classes (Barbu et al., NeurIPS 2019) that overlap ImageNet, in wise-ft's order
  (sorted folder names), each with its folder, its ObjectNet name and the ImageNet indices it maps to (wise-ft's
  objectnet_metadata: folder_to_objectnet_label.json, objectnet_to_imagenet_1k.json and the 2012 id maps).
"""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "src" / "dgmoe" / "data" / "shifts" / "imagenet_classes.json"


def show(repo: str, path: str) -> str:
    return subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], check=True, capture_output=True,
                          text=True).stdout


def commit(repo: str) -> str:
    return subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def assigned(source: str, name: str):
    """The literal value assigned to `name` at the top level of a Python file (read, never executed)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise KeyError(name)


def objectnet(repo: str) -> list[dict]:
    meta = "src/datasets/objectnet_metadata/"
    folders = json.loads(show(repo, meta + "folder_to_objectnet_label.json"))
    folder_of = {label: folder for folder, label in folders.items()}
    to_imagenet = json.loads(show(repo, meta + "objectnet_to_imagenet_1k.json"))
    pytorch_of = {v: int(k) for k, v in json.loads(show(repo, meta + "pytorch_to_imagenet_2012_id.json")).items()}
    index_of = {line.strip(): pytorch_of[i] for i, line in enumerate(show(repo, meta + "imagenet_to_label_2012_v2")
                                                                       .splitlines())}
    rows = {folder_of[label]: (label, sorted(index_of[n] for n in names.split("; ")))
            for label, names in to_imagenet.items()}
    return [{"folder": f, "name": rows[f][0], "imagenet": rows[f][1]} for f in sorted(rows)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wise-ft", required=True)
    ap.add_argument("--imagenet-r", required=True)
    a = ap.parse_args()
    import open_clip

    evalpy = show(a.imagenet_r, "eval.py")
    wnids = assigned(evalpy, "all_wnids")
    r_wnids = assigned(evalpy, "imagenet_r_wnids")
    r = assigned(show(a.wise_ft, "src/datasets/imagenet_r.py"), "CLASS_SUBLIST")
    assert r == [i for i, w in enumerate(wnids) if w in r_wnids], "ImageNet-R: the two sources disagree"
    data = {
        "sources": {"wise-ft": commit(a.wise_ft), "imagenet-r": commit(a.imagenet_r),
                    "open_clip": open_clip.__version__},
        "command": "python tests/parity/record_imagenet_shift_classes.py --wise-ft <repo> --imagenet-r <repo>",
        "wnids": wnids,
        "names": list(open_clip.IMAGENET_CLASSNAMES),
        "imagenet_r": r,
        "imagenet_a": assigned(show(a.wise_ft, "src/datasets/imagenet_a.py"), "CLASS_SUBLIST"),
        "objectnet": objectnet(a.wise_ft),
    }
    assert len(wnids) == len(data["names"]) == 1000 and wnids == sorted(wnids)
    assert len(data["imagenet_r"]) == len(data["imagenet_a"]) == 200 and len(data["objectnet"]) == 113
    OUT.write_text(json.dumps(data, indent=0) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
