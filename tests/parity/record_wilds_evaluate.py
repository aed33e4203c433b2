"""Record what WILDS' own leaderboard evaluator (`examples/evaluate.py`) expects and computes, as a JSON fixture.

Not a test (pytest does not collect it), and it imports no dgmoe. Run it where the `wilds` package (2.0.0,
`pip install --no-deps wilds==2.0.0 pytz`), torch, numpy and pandas import, with a checkout of WILDS'
repository for `examples/evaluate.py`:

    PYTHONPATH=/path/to/site-with-wilds:tests/helpers python tests/parity/record_wilds_evaluate.py \
        --wilds-repo /path/to/wilds --commit 472677590de351857197a9bf24958838c39c272b

It writes the tests' tiny FMoW and Camelyon17 fixtures (`wilds_fixtures.py`, WILDS' real layouts, plus the
`RELEASE_v<version>.txt` marker a WILDS release folder holds), writes for every split but `train` and every
replicate seed a prediction file named as the evaluator looks for it, with the predictions
`prediction(i, y_i, seed, n_classes)` for the split's i-th example (its label y_i where `(i + seed) % 3`,
else the next class: every split gets right and wrong predictions, and the seeds differ), and runs the
evaluator's `evaluate_benchmark` on them.
The fixture (`tests/parity/fixtures/wilds_evaluate.json`) holds, per WILDS dataset name: the splits and replicates
the evaluator reads, the file-name prefix of each (`{dataset}_split:{split}_seed:{seed}`, the file a `.csv`),
its metrics, each replicate's metric values (`evaluate_replicate`) and the aggregate it writes (mean and std with
ddof=1). iWildCam's fixture cannot be loaded by WILDS (its class count is asserted against the full release),
so only its names, splits, replicates and metrics are recorded, read from the evaluator's own functions.
WILDS' group averages call the compiled `torch_scatter.scatter(..., reduce="mean")`; where it is not installed,
`_torch_scatter_stand_in` gives the same numbers for WILDS' 1-D use (sum over the group / count, clamped to 1,
so an empty group averages 0, as torch_scatter's `scatter_mean`).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "fixtures" / "wilds_evaluate.json"
VERSIONS = {"fmow": "1.1", "camelyon17": "1.0", "iwildcam": "2.0"}


def prediction(i: int, y: int, seed: int, n_classes: int) -> int:
    """The recorded prediction for a split's i-th example, label `y`, under replicate `seed` (the tests use the
    same rule on dgmoe's reading of the same files)."""
    return y if (i + seed) % 3 else (y + 1) % n_classes


def _torch_scatter_stand_in() -> None:
    """`torch_scatter.scatter(src, index, dim_size, reduce="mean")` on 1-D tensors, if torch_scatter is absent."""
    try:
        import torch_scatter  # noqa: F401
        return
    except ImportError:
        pass
    import types

    import torch

    def scatter(src, index, dim_size, reduce):
        assert reduce == "mean" and src.dim() == 1
        sums = torch.zeros(dim_size, dtype=src.dtype).index_add_(0, index, src)
        counts = torch.zeros(dim_size, dtype=src.dtype).index_add_(0, index, torch.ones_like(src))
        return sums / counts.clamp(min=1)

    sys.modules["torch_scatter"] = types.SimpleNamespace(scatter=scatter)  # type: ignore[assignment]


def _load_evaluate(repo: Path):
    spec = importlib.util.spec_from_file_location("wilds_evaluate", repo / "examples" / "evaluate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _closure(fn, name: str):
    """A nested function of `evaluate_benchmark` (the evaluator defines its naming rules inside it)."""
    import types

    code = next(c for c in fn.__code__.co_consts if isinstance(c, types.CodeType) and c.co_name == name)
    return types.FunctionType(code, fn.__globals__)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wilds-repo", type=Path, required=True)
    parser.add_argument("--commit", required=True)
    args = parser.parse_args()
    import numpy as np
    import wilds
    from wilds import get_dataset
    from wilds_fixtures import write_camelyon, write_fmow

    _torch_scatter_stand_in()
    evaluate = _load_evaluate(args.wilds_repo)
    replicates = _closure(evaluate.evaluate_benchmark, "get_replicates")
    metrics = _closure(evaluate.evaluate_benchmark, "get_metrics")
    out: dict = {"wilds_version": wilds.__version__, "wilds_commit": args.commit,
                 "evaluator": "examples/evaluate.py", "prediction": "y_i if (i + seed) % 3 else (y_i + 1) % n_classes",
                 "command": "PYTHONPATH=<site with wilds 2.0.0 and pytz>:tests/helpers python "
                            "tests/parity/record_wilds_evaluate.py --wilds-repo <wilds checkout> --commit <sha>",
                 "datasets": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        write_fmow(root), write_camelyon(root)
        for name, version in VERSIONS.items():
            folder = root / f"{name}_v{version}"
            if folder.is_dir():
                (folder / f"RELEASE_v{version}.txt").write_text("")
        for name in ("fmow", "camelyon17"):
            dataset = get_dataset(name, root_dir=str(root), download=False)
            splits = [s for s in dataset.split_dict if s != "train"]
            preds_dir = Path(tmp) / "preds" / name
            preds_dir.mkdir(parents=True)
            per_replicate: dict = {}
            for split in splits:
                labels = [int(y) for y in dataset.get_subset(split).y_array]
                for replicate in replicates(name):
                    seed = int(replicate.split(":")[1])
                    file = preds_dir / f"{name}_split:{split}_{replicate}_epoch:best_pred.csv"
                    file.write_text("".join(f"{prediction(i, y, seed, dataset.n_classes)}\n"
                                            for i, y in enumerate(labels)))
                    values = evaluate.evaluate_replicate(dataset, split, evaluate.get_predictions(str(file)))
                    per_replicate.setdefault(split, {})[replicate] = {m: float(values[m]) for m in metrics(name)}
            results_dir = Path(tmp) / "results"
            results_dir.mkdir(exist_ok=True)
            aggregate = evaluate.evaluate_benchmark(name, str(preds_dir), str(results_dir), str(root))
            out["datasets"][name] = {
                "splits": splits, "split_sizes": {s: len(dataset.get_subset(s)) for s in splits},
                "n_classes": dataset.n_classes, "replicates": replicates(name), "metrics": metrics(name),
                "file_prefixes": {s: [f"{name}_split:{s}_{r}" for r in replicates(name)] for s in splits},
                "replicate_metrics": per_replicate,
                "aggregate": {s: {k: float(v) for k, v in m.items()} for s, m in aggregate.items()},
            }
        out["datasets"]["iwildcam"] = {"splits": ["id_val", "id_test", "val", "test"],  # WILDS' split_dict
                                       "replicates": replicates("iwildcam"), "metrics": metrics("iwildcam"),
                                       "file_prefixes": {s: [f"iwildcam_split:{s}_{r}" for r in replicates("iwildcam")]
                                                         for s in ("id_val", "id_test", "val", "test")}}
    assert all(np.isfinite(v) for d in ("fmow", "camelyon17") for s in out["datasets"][d]["aggregate"].values()
               for v in s.values())
    FIXTURE.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    sys.exit(main())
