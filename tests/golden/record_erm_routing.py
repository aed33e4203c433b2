"""Record the golden GMoE run's routing decisions within rounding of a tie (tests/helpers/routing_replay.py):

    python tests/golden/record_erm_routing.py

Only on a machine whose kernels reproduce tests/golden/erm_micro_records.json bit for bit (checked first; the
records were made on AVX-512 kernels, torch 2.13 CPU, one thread): the decisions must be the ones that made
the records. Writes tests/golden/erm_micro_routing.safetensors (per model: call, unit, margin and experts columns;
calls per model and provenance in its metadata). Not a test module (pytest does not collect it).
"""
from __future__ import annotations

import platform
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))

import torch  # noqa: E402
from golden_runs import RECORDS, ROUNDING_MARGIN, run_golden, save_routing  # noqa: E402

import dgmoe  # noqa: E402

COMMAND = "python tests/golden/record_erm_routing.py"


def main() -> None:
    traces = {}
    for model in sorted(RECORDS["runs"]):
        with tempfile.TemporaryDirectory() as tmp:
            result, trace = run_golden(model, Path(tmp) / model)
        want = RECORDS["runs"][model]["records"]
        got = [{key: record[key] for key in row} for record, row in zip(result.records, want)]
        if got != want:
            sys.exit(f"{model}: this machine's kernels do not reproduce the golden records bit for bit; record the "
                     "routing where they do")
        if trace["calls"]:
            traces[model] = trace
            print(f"{model}: {len(trace['tokens'])} decisions within {ROUNDING_MARGIN:g} of a tie in "
                  f"{trace['calls']} routing calls")
    save_routing(traces, {
        "command": COMMAND, "margin": str(ROUNDING_MARGIN), "dgmoe": dgmoe.__version__, "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
        "format": "per model: MoEMlp.route's call number in the run, the routed unit (token), the relative margin "
                  "(p_k - p_k+1) / p_k and the experts by decreasing gate, for every decision within margin of a tie"})


if __name__ == "__main__":
    main()
