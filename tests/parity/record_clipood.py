"""Record thuml/CLIPood's Beta moving average for tests/parity/test_clipood_parity.py (does not import dgmoe):

    python tests/parity/record_clipood.py --clipood /work/.mirror/thuml+CLIPood/repo

Runs the authors' `GeneralMovingAverage` (engine.py, its class source read from the repository and executed
alone: the module's other imports need their CLIP package) on a tiny nn.Linear(3, 2) whose parameters are set to
a seeded sequence theta_0 ... theta_T before each `update()`, with their weight function (main.py:
`scipy.stats.beta(beta, beta).pdf((it + 0.5) / (total_iter + 1))`), and writes the sequence, the weights and
the average to tests/parity/fixtures/clipood_bma.json.
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import subprocess
from pathlib import Path

import numpy as np
import scipy
import scipy.stats
import torch

OUT = Path(__file__).resolve().parent / "fixtures" / "clipood_bma.json"
TOTAL, BETA = 7, 0.5


def authors_class(repo: str):
    source = subprocess.run(["git", "-C", repo, "show", "HEAD:engine.py"], check=True, capture_output=True,
                            text=True).stdout
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "GeneralMovingAverage")
    namespace = {"copy": copy, "torch": torch}
    exec(compile(ast.Module([node], []), "engine.py", "exec"), namespace)
    return namespace["GeneralMovingAverage"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clipood", required=True)
    repo = ap.parse_args().clipood
    moving = authors_class(repo)
    rng = np.random.RandomState(0)
    thetas = [[rng.randn(2, 3).tolist(), rng.randn(2).tolist()] for _ in range(TOTAL + 1)]
    model = torch.nn.Linear(3, 2).double()

    def load(theta):
        with torch.no_grad():
            model.weight.copy_(torch.tensor(theta[0], dtype=torch.float64))
            model.bias.copy_(torch.tensor(theta[1], dtype=torch.float64))

    beta_dist = scipy.stats.beta(BETA, BETA)
    load(thetas[0])
    bma = moving(model, lambda it: beta_dist.pdf((it + 0.5) / (TOTAL + 1)))
    for theta in thetas[1:]:
        load(theta)
        bma.update()
    commit = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"], check=True, capture_output=True,
                            text=True).stdout.strip()
    OUT.write_text(json.dumps({
        "peer": "thuml/CLIPood engine.GeneralMovingAverage", "commit": commit, "scipy": scipy.__version__,
        "command": "python tests/parity/record_clipood.py --clipood <thuml/CLIPood checkout>",
        "total_iter": TOTAL, "beta": BETA, "thetas": thetas,
        "weights": [float(beta_dist.pdf((i + 0.5) / (TOTAL + 1))) for i in range(TOTAL + 1)],
        "average": [bma.moving_avg.weight.tolist(), bma.moving_avg.bias.tolist()]}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
