"""Record locuslab/FLYP's contrastive loss for tests/parity/test_flyp_parity.py (does not import dgmoe):

    python tests/parity/record_flyp.py --flyp /work/.mirror/locuslab+FLYP/repo

Runs the authors' `ClipLoss` (clip/loss.py, executed from the repository as it is) the way their `flyp_loss`
calls it: on the batch's image and caption features normalised as their CLIP `forward` returns them, with
exp(logit_scale); seeded random features of 6 pairs in 8 dimensions, for two scales. Writes
tests/parity/fixtures/flyp_loss.json: the raw features, the scales and the losses.
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent / "fixtures" / "flyp_loss.json"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flyp", required=True)
    repo = ap.parse_args().flyp
    source = subprocess.run(["git", "-C", repo, "show", "HEAD:clip/loss.py"], check=True, capture_output=True,
                            text=True).stdout
    namespace: dict = {"__name__": "flyp_clip_loss"}
    exec(compile(source, "clip/loss.py", "exec"), namespace)
    rng = np.random.RandomState(0)
    image, text = rng.randn(6, 8), rng.randn(6, 8)
    cases = []
    for scale in (1 / 0.07, 3.0):
        loss_fn = namespace["ClipLoss"](local_loss=False, gather_with_grad=False, cache_labels=True, rank=0,
                                        world_size=1, use_horovod=False)
        f = torch.tensor(image)
        g = torch.tensor(text)
        f, g = f / f.norm(dim=-1, keepdim=True), g / g.norm(dim=-1, keepdim=True)
        cases.append({"scale": scale, "loss": float(loss_fn(f, g, torch.tensor(scale, dtype=torch.float64)))})
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    OUT.write_text(json.dumps({"peer": "locuslab/FLYP clip/loss.py ClipLoss", "commit": commit,
                               "torch": torch.__version__,
                               "command": "python tests/parity/record_flyp.py --flyp <locuslab/FLYP checkout>",
                               "image": image.tolist(), "text": text.tolist(), "cases": cases}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
