"""Experiment trackers: Weights & Biases (`--wandb`) and MLflow (`--mlflow`), sinks beside TensorBoard.

Each logs every numeric field of every record at its step, the run config as parameters (flat keys, as the records'
`args`), and the run folder and its identity hash as tags. A run that resumes continues the same tracker run: the
tracker's run id and the last step it holds are kept in `<run>/trackers.json` (written atomically after each
logged record), so a resumed run logs what the tracker lacks and nothing twice. A record the killed run wrote but
never logged (killed between the two) is logged on resume, from the records the resume state holds; MLflow is also
asked for its last step, which closes the window between a logged record and the ledger's write. W&B cannot be
asked offline: there the ledger alone counts, and online W&B itself drops a step it already holds.

The packages are optional extras (`pip install 'dgmoe[wandb]'`, `'dgmoe[mlflow]'`); `require_trackers` checks
them before anything is written.
"""
from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from dgmoe.engine.config import RunConfig
from dgmoe.engine.io import write_json_atomic
from dgmoe.engine.sinks import Sink
from dgmoe.errors import UsageError

LEDGER = "trackers.json"
#: tracker -> (the module it imports, the extra that installs it)
PACKAGES = {"wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow")}


def wanted(cfg: RunConfig) -> list[str]:
    """The trackers a run asked for, in a fixed order."""
    return [name for name in PACKAGES if getattr(cfg.execution, name)]


def require_trackers(cfg: RunConfig) -> None:
    """One line naming the extra when a tracker's package does not import."""
    for name in wanted(cfg):
        module, extra = PACKAGES[name]
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise UsageError(f"--{name} needs the {module} package ({error}): pip install 'dgmoe[{extra}]'") from None


def numbers(record: Mapping[str, Any]) -> dict[str, float]:
    """Every numeric field of a record (booleans and nested values left out)."""
    return {k: float(v) for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def parameters(cfg: RunConfig) -> dict[str, Any]:
    """The run config as tracker parameters: its flat keys (the records' `args`), lists as text."""
    return {k: (",".join(map(str, v)) if isinstance(v, (list, tuple)) else v) for k, v in cfg.flat().items()}


class Ledger:
    """`<run>/trackers.json`: per tracker, its run's id, where it lives and the last step it holds."""

    def __init__(self, out: Path):
        self.path = out / LEDGER
        self.entries: dict[str, dict[str, Any]] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, name: str) -> dict[str, Any] | None:
        return self.entries.get(name)

    def put(self, name: str, entry: dict[str, Any]) -> None:
        self.entries[name] = entry
        write_json_atomic(self.path, self.entries)


class TrackerSink(Sink):
    """A tracker run kept in step with the run's records (see the module docstring)."""

    name = ""

    def __init__(self, cfg: RunConfig, out: Path, records: Sequence[Mapping[str, Any]], ledger: Ledger):
        self.ledger = ledger  # (one for all trackers of the run: each write holds every tracker's entry)
        entry = self.ledger.get(self.name)
        self.entry = self.open(cfg, out, entry) if entry is None else self.resume(cfg, out, entry)
        self.entry["last_step"] = max(self.entry.get("last_step", -1), self.tracker_last_step())
        self.ledger.put(self.name, self.entry)
        for record in records:  # what the killed run wrote but did not log
            self.checkpoint(dict(record))

    # -- each tracker ------------------------------------------------------------------------------------------
    def open(self, cfg: RunConfig, out: Path, entry: None) -> dict[str, Any]:
        raise NotImplementedError

    def resume(self, cfg: RunConfig, out: Path, entry: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def log(self, values: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def tracker_last_step(self) -> int:
        return -1

    # -- the sink ----------------------------------------------------------------------------------------------
    def checkpoint(self, record: dict[str, Any]) -> None:
        step = int(record["step"])
        if step <= self.entry["last_step"]:
            return  # logged before the run was killed and resumed
        self.log(numbers(record), step)
        self.entry["last_step"] = step
        self.ledger.put(self.name, self.entry)


class WandbSink(TrackerSink):
    """W&B (`--wandb`): project, entity and name from the flags, else W&B's environment variables
    (WANDB_PROJECT, WANDB_ENTITY, WANDB_NAME), else `dgmoe`, W&B's default entity and the run's label or folder
    name. Its files go to `<run>/wandb`; `WANDB_MODE=offline` needs no network (`wandb sync` uploads later)."""

    name = "wandb"

    def _init(self, cfg: RunConfig, out: Path, run_id: str | None, project: str | None, entity: str | None,
              fresh: bool) -> Any:
        import wandb

        ex = cfg.execution
        return wandb.init(project=project, entity=entity, id=run_id, resume="allow", dir=str(out),
                          name=ex.wandb_name or os.environ.get("WANDB_NAME") or ex.label or out.name,
                          config={**parameters(cfg), "dgmoe_run_dir": str(out.resolve()),
                                  "dgmoe_identity": cfg.identity_hash()} if fresh else None,
                          tags=[f"identity:{cfg.identity_hash()}"] if fresh else None)

    def open(self, cfg: RunConfig, out: Path, entry: None) -> dict[str, Any]:
        ex = cfg.execution
        project = ex.wandb_project or os.environ.get("WANDB_PROJECT") or "dgmoe"
        entity = ex.wandb_entity or os.environ.get("WANDB_ENTITY")
        self.run = self._init(cfg, out, None, project, entity, fresh=True)
        return {"id": self.run.id, "project": project, "entity": entity, "last_step": -1}

    def resume(self, cfg: RunConfig, out: Path, entry: dict[str, Any]) -> dict[str, Any]:
        self.run = self._init(cfg, out, entry["id"], entry["project"], entry.get("entity"), fresh=False)
        return dict(entry)

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowSink(TrackerSink):
    """MLflow (`--mlflow`): the tracking URI from `--mlflow-uri`, else MLFLOW_TRACKING_URI, else a local file store
    `./mlruns` (MLflow's own default before its database backends; dgmoe allows it with MLFLOW_ALLOW_FILE_STORE for
    that store only); the experiment from `--mlflow-experiment`, else MLFLOW_EXPERIMENT_NAME, else `dgmoe`. A
    resumed run uses the URI and run id its first segment recorded, wherever it is started from."""

    name = "mlflow"

    def _client(self, uri: str) -> Any:
        from mlflow.tracking import MlflowClient

        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        return MlflowClient(tracking_uri=uri)

    def open(self, cfg: RunConfig, out: Path, entry: None) -> dict[str, Any]:
        ex = cfg.execution
        uri = ex.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").resolve().as_uri()
        if "://" not in uri and not uri.startswith("file:"):
            uri = Path(uri).resolve().as_uri()  # a folder given as a path
        self.client = self._client(uri)
        name = ex.mlflow_experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "dgmoe"
        found = self.client.get_experiment_by_name(name)
        experiment = found.experiment_id if found is not None else self.client.create_experiment(name)
        run = self.client.create_run(experiment, run_name=ex.label or out.name,
                                     tags={"dgmoe.run_dir": str(out.resolve()), "dgmoe.identity": cfg.identity_hash()})
        self.run_id = run.info.run_id
        params = parameters(cfg)
        from mlflow.entities import Param

        for i in range(0, len(params), 100):  # MLflow's batch limit
            self.client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in list(params.items())[i:i + 100]])
        return {"uri": uri, "experiment_id": experiment, "run_id": self.run_id, "last_step": -1}

    def resume(self, cfg: RunConfig, out: Path, entry: dict[str, Any]) -> dict[str, Any]:
        self.client, self.run_id = self._client(entry["uri"]), entry["run_id"]
        self.client.update_run(self.run_id, status="RUNNING")
        return dict(entry)

    def tracker_last_step(self) -> int:
        history = self.client.get_metric_history(self.run_id, "step")
        return max((int(m.step) for m in history), default=-1)

    def log(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


SINKS = {"wandb": WandbSink, "mlflow": MlflowSink}


def tracker_sinks(cfg: RunConfig, out: Path, records: Sequence[Mapping[str, Any]]) -> list[Sink]:
    """The sinks of the trackers a run asked for, each continuing its tracker run when the run resumes."""
    ledger = Ledger(out)
    return [SINKS[name](cfg, out, records, ledger) for name in wanted(cfg)]
