"""`dgmoe export peft RUN_DIR --out DIR`: a `--peft lora` run's LoRA weights (and its classifier) as a peft adapter
folder, `adapter_config.json` + `adapter_model.safetensors` in peft's key names (`dgmoe.models.peft_interop`),
which peft's `PeftModel.from_pretrained` loads onto the run's timm-named architecture with its base weights.
Both files are written atomically, the configuration last: DIR holding it holds an adapter, which is never
overwritten; weights without it are what an interrupted export left, and the next export replaces them (and removes
the temporary files it left)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dgmoe.errors import UsageError
from dgmoe.settings import Settings, existing_folder, setting


@dataclass(frozen=True)
class PeftExportConfig(Settings):
    """`dgmoe export peft RUN_DIR --out DIR`."""

    run_dir: str = setting("", "A finished (or checkpointed) `--peft lora` run folder.", argument=True, required=True,
                           parser=existing_folder)
    out_dir: str = setting("", "The adapter folder to write (adapter_config.json, adapter_model.safetensors).",
                           flags=("--out",), required=True)
    which: str = setting("best", "Which of the run's weights: best (training-domain validation) or last.",
                         choices=("best", "last"))


def export_peft(options: PeftExportConfig) -> Path:
    """Write the run's LoRA as a peft adapter folder; returns it. Refused before anything is written when the
    run is not a LoRA run or DIR already holds an adapter (its configuration, written last)."""
    from dgmoe.engine.checkpoint import load_run
    from dgmoe.engine.io import remove_stale_temporaries, save_safetensors_atomic, write_json_atomic
    from dgmoe.models.peft_interop import ADAPTER_CONFIG, ADAPTER_WEIGHTS, peft_adapter

    out = Path(options.out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give the adapter folder to write")
    if (out / ADAPTER_CONFIG).exists():
        raise UsageError(f"--out {out} already holds {ADAPTER_CONFIG}; choose another folder (nothing is overwritten)")
    network, config = load_run(options.run_dir, options.which)
    base = config.get("model_build", {}).get("name")
    try:
        adapter, tensors = peft_adapter(network, base_model=base)
    except UsageError as e:
        raise UsageError(f"{options.run_dir}: {e}") from None
    if out.is_dir():
        remove_stale_temporaries(out, names=(ADAPTER_WEIGHTS, ADAPTER_CONFIG))
    save_safetensors_atomic(out / ADAPTER_WEIGHTS, tensors, metadata={"format": "pt"})
    write_json_atomic(out / ADAPTER_CONFIG, adapter)
    return out
