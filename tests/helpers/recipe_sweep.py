"""A fake finished recipe sweep for `dgmoe results --recipe`: run folders with DomainBed records whose selected
accuracies are known, laid out as `dgmoe recipe launch` lays them out (`<out>/<part>/<run>/results.jsonl`).

`write_run` writes one run: two checkpoints (steps 0 and 100); at step 100 every training domain's `out`
accuracy is higher (so training-domain validation picks it) and each domain's accuracies are the given
ones. WILDS-style runs also carry `wilds_val_env` and `env{t}_acc_avg` / `env{t}_acc_worst_group` /
`env{t}_f1_macro` for their held-out splits.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence


def write_run(folder: Path, dataset: str, domains: Sequence[str], algorithm: str, model: str,
              test_envs: Sequence[int], accs: Mapping[int, float], trial_seed: int = 0, hparams_seed: int = 0,
              wilds: Mapping[str, float] | None = None, val_env: int | None = None) -> Path:
    """One finished run; `accs[i]` is domain i's in and out accuracy at the chosen checkpoint (step 100);
    `wilds`: metric key suffix -> value for every held-out split (with `val_env`, the validation split)."""
    folder.mkdir(parents=True, exist_ok=True)
    args = {"dataset": dataset, "algorithm": algorithm, "model": model, "test_envs": list(test_envs),
            "trial_seed": trial_seed, "hparams_seed": hparams_seed, "seed": trial_seed, "domains": list(domains),
            "steps": 101, "checkpoint_freq": 100, "output_dir": str(folder)}
    lines = []
    for step, scale in ((0, 0.5), (100, 1.0)):
        record = {"step": step, "loss": 1.0}
        for i in range(len(domains)):
            record[f"env{i}_in_acc"] = accs.get(i, 0.5) * scale
            record[f"env{i}_out_acc"] = accs.get(i, 0.5) * scale
        if wilds is not None:
            record["wilds_val_env"] = val_env
            record["wilds_groups"] = "region"
            for t in test_envs:
                for key, value in wilds.items():
                    record[f"env{t}_{key}"] = value * scale
        lines.append(json.dumps({**record, "hparams": {"lr": 1e-4}, "args": args}))
    (folder / "results.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "done").write_text("done\n")
    return folder
