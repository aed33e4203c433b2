"""The golden micro ERM runs of tests/golden/erm_micro_records.json: their configuration, declared once for the
test (tests/engine/test_engine_golden.py) and the routing recorder (tests/golden/record_erm_routing.py)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from routing_replay import record_ambiguous, replay

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
RECORDS = json.loads((GOLDEN_DIR / "erm_micro_records.json").read_text())
ROUTING_FILE = GOLDEN_DIR / "erm_micro_routing.safetensors"
#: A top-k decision within this relative margin of a tie, (p_k - p_k+1) / p_k, is one rounding may flip: the
#: recorder notes these decisions, the test replays them where the run's own margin is also below it. A run on
#: other kernels drifts from the reference's trajectory (its records by up to the budget in
#: tests/engine/test_engine_golden.py) and one token's probabilities drift more than a loss that averages
#: thousands: on scalar, AVX2 and AVX-512 kernels (ATen, MKL and oneDNN forced together) the flipped decisions'
#: margins were up to 5.7e-4 (reference) and 5.9e-4 (run), by step 29. 1e-2 leaves a factor 17.
ROUNDING_MARGIN = 1e-2


def load_routing() -> dict[str, dict]:
    """The recorded decisions near a tie, per model: {"calls": n, "tokens": [[call, unit, margin, experts]]}."""
    from safetensors import safe_open

    with safe_open(str(ROUTING_FILE), "pt") as f:
        calls = json.loads(f.metadata()["calls"])
        tensors = {key: f.get_tensor(key) for key in f.keys()}
    return {model: {"calls": n, "tokens": [[int(c), int(u), float(m), e.tolist()] for c, u, m, e in zip(
        tensors[f"{model}.call"], tensors[f"{model}.unit"], tensors[f"{model}.margin"], tensors[f"{model}.experts"])]}
        for model, n in calls.items()}


def save_routing(traces: dict[str, dict], metadata: dict[str, str]) -> None:
    from safetensors.torch import save_file

    tensors = {}
    for model, trace in traces.items():
        columns = list(zip(*trace["tokens"]))
        tensors[f"{model}.call"] = torch.tensor(columns[0], dtype=torch.int32)
        tensors[f"{model}.unit"] = torch.tensor(columns[1], dtype=torch.int32)
        tensors[f"{model}.margin"] = torch.tensor(columns[2], dtype=torch.float32)
        tensors[f"{model}.experts"] = torch.tensor(columns[3], dtype=torch.uint8)
    calls = json.dumps({model: trace["calls"] for model, trace in traces.items()})
    save_file(tensors, str(ROUTING_FILE), metadata=dict(metadata, calls=calls))


def run_golden(model: str, output_dir: Path, routing: dict | None = None, **changes):
    """Train one golden run (`changes` override its settings, for the tests that a change fails) and return
    (result, what the routing context yielded). With `routing` (a recorded trace) the reference's decisions are
    replayed where rounding flips them; without, the decisions within ROUNDING_MARGIN of a tie are noted."""
    from dgmoe.engine import train

    settings = dict(dataset="RotatedMNIST", model=model, model_kwargs={"depth": 4}, hparams={"drop_path_rate": 0.1},
                    steps=30, checkpoint_freq=10, n_per_domain=60, num_threads=1, progress="none",
                    output_dir=str(output_dir))
    settings.update(changes)
    context = record_ambiguous(ROUNDING_MARGIN) if routing is None else replay(routing, ROUNDING_MARGIN)
    with context as seen:
        result = train(**settings)
    return result, seen
