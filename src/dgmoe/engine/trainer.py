"""The training run: an importable function, DomainBed's protocol, and runs that are never lost.

`train(cfg)` trains `cfg.algorithm` on the training domains of `cfg.data.dataset` with the `cfg.model`
backbone, drawing one batch per training domain per step, and at every checkpoint appends a DomainBed
record (`env{i}_in_acc`, `env{i}_out_acc` for every domain, `step`, `epoch`, update means, `step_time`,
`mem_gb`, `hparams`, `args`) to `results.jsonl`. It returns the records with the final and the selected
(training-domain validation) test accuracies.

Resuming is exact: batches and augmentations are a pure function of (seed, step, domain), and the
resume state holds the weights, optimiser and algorithm state, the torch and numpy RNGs and the records. A
run killed at any point and started again with the same command continues from its last checkpoint and
ends with the same records (timing fields aside) and bitwise the same weights on CPU.
"""
from __future__ import annotations

import contextlib
import logging
import os
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from dgmoe.data.loaders import EvalBatches
from dgmoe.devices import resolve_device
from dgmoe.engine.closing import finished_line, selected_by_training_domains, test_summary
from dgmoe.engine.config import RunConfig, identity_differences
from dgmoe.engine.distributed import DistInfo, barrier, make_gradient_averager, process_group, shard
from dgmoe.engine.evaluate import evaluate_domains, online_val_loss, sampled_splits
from dgmoe.engine.finite import FiniteWatch
from dgmoe.engine.io import read_jsonl, stale_temporaries
from dgmoe.engine.lock import RunLock
from dgmoe.engine.provenance import as_metadata, provenance
from dgmoe.engine.resume import RunState, capture, load_checked, restore
from dgmoe.engine.rundir import RunWriter, Schedule, read_done, tidy_finished
from dgmoe.engine.runlog import RunLog
from dgmoe.engine.setup import RunSetup, prepare_run
from dgmoe.engine.sinks import ConsoleSink, Sink, TensorBoardSink, tensorboard_writer_class
from dgmoe.engine.step_metrics import LazyMetrics, StepMetrics
from dgmoe.engine.trackers import require_trackers, tracker_sinks
from dgmoe.errors import Interrupted, NonFiniteLossError, RunLockedError, UsageError
from dgmoe.records import train_domain_val_acc
from dgmoe.seeding import make_deterministic, seed_hash


@dataclass
class RunResult:
    """A finished (or already finished) run: its folder and records, with the accuracies users look for."""

    output_dir: Path
    records: list[dict[str, Any]]
    resumed_from: int | None
    already_done: bool

    @property
    def final(self) -> dict[str, Any]:
        """The last checkpoint: `step`, `test_acc` (mean over held-out domains) and `test_accs` per domain."""
        return test_summary(self.records[-1])

    @property
    def selected(self) -> dict[str, Any] | None:
        """The checkpoint training-domain validation selects (the first with the best mean training-domain
        `out` accuracy, as DomainBed within a run), with its `val_acc`; None without validation accuracies."""
        return selected_by_training_domains(self.records)


class RunMismatchError(UsageError):
    """The output folder holds a different run."""


def train(cfg: RunConfig | None = None, *, sinks: Sequence[Sink] = (), **settings: Any) -> RunResult:
    """Train one run (or resume it, or return at once if it is finished).

    `cfg` describes the run; flat settings (`dataset=`, `model=`, `steps=`, any `dgmoe train` flag without
    its dashes) build one or change the given one: `train(dataset="PACS", test_envs=(0,), output_dir=...)`.
    `sinks` are more views of the progress (`dgmoe.engine.sinks.Sink`), beside the console and TensorBoard.
    """
    cfg = RunConfig.from_flat(settings, base=cfg)
    if cfg.execution.output_dir is None:
        raise UsageError("--output-dir is required (the run folder)")
    out = Path(cfg.execution.output_dir)
    cfg = cfg.replace(device=resolve_device(cfg.execution.device))  # `--device auto`: config.json records the used one
    with process_group(cfg.execution.device) as info:  # torchrun's, joined and left here (no-op without it)
        return _train_in_group(cfg, out, info, sinks)


def _train_in_group(cfg: RunConfig, out: Path, info: DistInfo, sinks: Sequence[Sink]) -> RunResult:
    if info.enabled and cfg.execution.device.startswith("cuda"):
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        cfg = cfg.replace(device=f"cuda:{local}")
    with RunLog(console=info.is_main and cfg.execution.progress != "none") as run_log:
        if out.exists() and not out.is_dir():
            raise UsageError(f"--output-dir {out} is a file, not a folder")
        # read only: a folder holding another run is refused untouched, a finished one before any data loads
        if _check_output_dir(cfg) != "done":
            setup = prepare_run(cfg)  # validates data, test envs, model, algorithm before anything is written
            run_log.say(setup.announcement())
            run_log.say(setup.summary())
            if (plan := setup.phase_plan()) is not None:
                run_log.say(plan)
            if cfg.execution.tensorboard:
                tensorboard_writer_class()
            require_trackers(cfg)
            with RunLock(out) if info.is_main else contextlib.nullcontext() as lock:  # one trainer per run folder
                state = _check_output_dir(cfg)  # (another trainer may have finished it meanwhile)
                if state != "done":
                    with setup.arithmetic():  # TF32 switched on (tf32) or off (fp32) once, restored after
                        return _train_locked(cfg, setup, out, info, run_log, sinks, lock, state == "takeover")
        if info.is_main:
            _tidy_finished(out, cfg.execution.keep_resume)
        run_log.say(f"{out} is finished (its `done` marker is present); nothing to do")
    records = read_jsonl(out / "results.jsonl")
    return RunResult(out, records, None, True)


def _check_output_dir(cfg: RunConfig) -> str:
    """Validate the output folder: "done" when it holds this run, finished; "takeover" when it holds another
    run that wrote no record yet (it failed before its first checkpoint); "train" otherwise."""
    out = Path(str(cfg.execution.output_dir))
    config_path = out / "config.json"
    if not config_path.exists():
        if cfg.execution.extend:
            raise UsageError(f"--extend: {out} holds no run to extend (no config.json); without --extend the same "
                             "command starts it")
        if out.exists() and (out / "results.jsonl").exists():
            raise RunMismatchError(f"{out} holds results.jsonl but no config.json; refusing to mix runs")
        return "train"
    from dgmoe.engine.checkpoint import read_run_config, saved_run

    config = read_run_config(out)
    saved = saved_run(config)
    diff = identity_differences(saved, cfg)
    if cfg.execution.extend and diff == ["steps"]:
        _check_extension(out, config["n_steps"], cfg)
        return "train"
    if diff and not (out / "done").exists() and not (out / "resume.pt").exists() \
            and not read_jsonl(out / "results.jsonl"):
        return "takeover"
    if diff:
        hint = " (to continue it to more steps, add --extend)" if diff == ["steps"] else ""
        if diff == ["fused_optimizer"]:  # (its Adam steps round differently: as --compile's refusal says)
            was = "with" if saved.training.fused_optimizer else "without"
            then = "find it finished" if (out / "done").exists() else "resume it exactly"
            hint = (f" (it was trained {was} --fused-optimizer, whose Adam steps round differently: run the same "
                    f"command {was} --fused-optimizer to {then})")
        raise RunMismatchError(f"{out} holds a different run (differs in: {', '.join(diff)}){hint}; "
                               "choose another --output-dir")
    return "done" if (out / "done").exists() else "train"


def _tidy_finished(out: Path, keep_resume: bool) -> None:
    """Temporaries of killed writers and a resume.pt left by a crash after `done`, removed if no trainer
    holds the folder (a finished run is otherwise only read)."""
    done = read_done(out) or {}
    if not (stale_temporaries(out) or ((out / "resume.pt").exists() and done.get("keep_resume") is False)):
        return
    try:
        with RunLock(out):
            tidy_finished(out, keep_resume)
    except (RunLockedError, OSError):
        pass


def _schedules(out: Path, n_steps: int) -> set[int]:
    """The step counts a resume state of this run may have: its own, and those `--extend` lengthened."""
    if not (out / "config.json").exists():
        return {n_steps}
    from dgmoe.engine.checkpoint import read_run_config

    config = read_run_config(out)
    return {n_steps, config.get("n_steps"), *(h.get("n_steps") for h in config.get("extended_from", []))} - {None}


def _check_extension(out: Path, old_steps: int, cfg: RunConfig) -> None:
    """`--extend`: the new schedule must be longer, and a finished run must still have its training state."""
    new_steps = cfg.training.steps
    if new_steps is None or new_steps <= old_steps:
        raise UsageError(f"--extend needs --steps larger than the {old_steps} steps {out} was set to run")
    from dgmoe.algorithms import get_algorithm

    bound = get_algorithm(cfg.algorithm.name).LENGTH_BOUND
    if bound:
        raise UsageError(f"--extend: {cfg.algorithm.name} {bound} ({old_steps} steps in {out}), so a longer "
                         f"schedule is another run: start it in a new --output-dir with --steps {new_steps}")
    done = read_done(out)
    if done is not None and done.get("stopped_early"):
        raise UsageError(f"{out} stopped early ({cfg.algorithm.name} ended its own training); it cannot be extended")
    if done is not None and not (out / "resume.pt").exists():
        raise UsageError(f"{out} is finished and has no resume.pt (its optimiser state was deleted when it "
                         "finished): only a run trained with --keep-resume can be extended exactly")


def _train_locked(cfg: RunConfig, setup: RunSetup, out: Path, info: DistInfo, run_log: RunLog,
                  extra_sinks: Sequence[Sink], lock: RunLock | None = None, takeover: bool = False) -> RunResult:
    """The run, once this process holds the run folder (or is a non-writing rank under torchrun)."""
    ex, made_by = cfg.execution, provenance(cfg.execution.device)
    writer = RunWriter(out, ex.skip_model_save, ex.save_model_every_checkpoint, ex.save_best, ex.keep_resume,
                       enabled=info.is_main, metadata=as_metadata(made_by), lock=lock)
    resume: list[dict[str, Any]] = []  # the resume state, checked before anything is written; popped to restore
    if writer.resume_path.exists():
        resume.append(load_checked(writer.resume_path, setup.identity(), _schedules(out, setup.n_steps),
                                   setup.algorithm, ex.compile))
    if takeover:
        run_log.say(f"{out} holds no record yet (a run that failed before its first checkpoint): this run "
                    "replaces it")
    if ex.num_threads:
        torch.set_num_threads(ex.num_threads)
    make_deterministic()
    if ex.extend:
        writer.extend(setup.run_config(made_by))  # (a no-op unless the folder holds a shorter schedule)
    writer.start(setup.run_config(made_by), replace=takeover)
    if info.is_main:
        run_log.open(out)
    barrier(info)
    with _signals_interrupt():
        return _run_loop(cfg, setup, writer, run_log, info, extra_sinks, resume)


@contextlib.contextmanager
def _signals_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's stop) ends training as Ctrl-C does: through `Interrupted`, after which
    everything checkpointed so far is intact and the same command resumes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Interrupted(f"stopped by {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_loop(cfg: RunConfig, setup: RunSetup, writer: RunWriter, run_log: RunLog, info: DistInfo,
              extra_sinks: Sequence[Sink] = (), resume: list[dict[str, Any]] | None = None) -> RunResult:
    """The step loop: one batch per training domain, an update, and at checkpoints an evaluation."""
    ex, algorithm = cfg.execution, setup.placed_algorithm()  # built and seeded by prepare_run
    if info.enabled:
        algorithm.gradient_sync = make_gradient_averager(algorithm, info)
    batches = setup.train_batches()
    torch.manual_seed(seed_hash(cfg.seeds.seed, "train"))
    np.random.seed(seed_hash(cfg.seeds.seed, "train"))
    progress = RunState(records=[])
    if resume:
        progress = restore(resume.pop(), algorithm)
        writer.last_saved_step = progress.next_step - 1
        writer.rewrite_records(progress.records)  # drop any record written after the state
        run_log.say(f"resuming {writer.out} from step {progress.next_step}")
        if algorithm.stop_requested:  # it stopped early (SWAD's valley ended) and was killed before `done`
            writer.finish(progress.records, stopped_early=True)
            return RunResult(writer.out, progress.records, progress.next_step, False)
    start, n_steps = progress.next_step, setup.n_steps
    checkpoints = Schedule(n_steps, setup.checkpoint_freq)
    sinks = _sinks(cfg, setup, writer, run_log, info, start, checkpoints, progress.records)
    sinks += list(extra_sinks) if info.is_main else []
    autocast = setup.autocast()
    sums = StepMetrics()  # on the device until a checkpoint reads them: no host sync per step
    eval_batches = setup.eval_batches()
    algorithm.train()
    step, stopped_early, due, watch = start, False, checkpoints, FiniteWatch()
    steps = batches.iter_from(start, n_steps, ex.num_workers, pin_memory=setup.on_gpu)
    try:
        tic = time.perf_counter()
        for step, minibatches in zip(range(start, n_steps), steps):
            minibatches = [b.to(ex.device) for b in shard(minibatches, info)]
            setup.step_begins()  # (CUDA graphs: the previous step's graph outputs may be overwritten)
            with autocast:
                metrics = algorithm.update(minibatches, step)
            watch.observe(step, metrics)  # on the device: read back at checkpoints, before any record
            seconds = time.perf_counter() - tic
            sums.add({**metrics, "step_time": seconds})
            for sink in sinks:
                sink.step(step, LazyMetrics(metrics), seconds)
            if step in due:
                if (warning := watch.check(str(writer.out), stop=ex.on_nonfinite_loss == "stop")) is not None:
                    run_log.say(warning)
                with autocast:  # evaluation in the training precision (bf16 inference, as the step)
                    record = _checkpoint(step, cfg, setup, writer, progress, sums, info, eval_batches)
                if record is not None:  # (rank 0's)
                    for sink in sinks:
                        sink.checkpoint(record)
                sums.clear()
                if algorithm.stop_requested:
                    run_log.say(f"{cfg.algorithm.name} stops early at step {step}: the evaluated model can no "
                                "longer change")
                    stopped_early = True
                    break
            tic = time.perf_counter()
        if n_steps == 0 and start == 0:  # --steps 0: the initial network evaluated once, as step 0 (zero-shot)
            with autocast:
                record = _checkpoint(0, cfg, setup, writer, progress, sums, info, eval_batches)
            for sink in sinks:
                if record is not None:
                    sink.checkpoint(record)
    except (KeyboardInterrupt, Interrupted) as e:
        how = str(e) if isinstance(e, Interrupted) else "stopped by SIGINT (Ctrl-C)"
        kept = (f"checkpoints up to step {writer.last_saved_step} are kept; re-run the same command to resume "
                f"from step {writer.last_saved_step + 1}" if writer.last_saved_step is not None
                else "no checkpoint was reached; re-run the same command to start again")
        run_log.record(f"{how} at step {step}; {kept}")
        raise Interrupted(f"{writer.out}: {how} at step {step}; {kept}") from None
    except NonFiniteLossError as e:
        run_log.record(str(e))
        raise
    finally:
        steps.close()  # (a background loader stops here)
        for sink in sinks:
            sink.close()
    writer.finish(progress.records, stopped_early)
    result = RunResult(writer.out, progress.records, start or None, False)
    if progress.records and info.is_main:
        run_log.say(finished_line(result.output_dir, result.records))
    return result


def _sinks(cfg: RunConfig, setup: RunSetup, writer: RunWriter, run_log: RunLog, info: DistInfo, start: int,
           checkpoints: Schedule, records: list[dict[str, Any]]) -> list[Sink]:
    if not info.is_main:
        return []
    ex = cfg.execution
    sinks: list[Sink] = [ConsoleSink(run_log, ex.progress, start, setup.n_steps, checkpoints,
                                     setup.hparams["batch_size"] * len(setup.train_envs), setup.test_envs,
                                     ex.log_every_s)]
    if ex.tensorboard:
        sinks.append(TensorBoardSink(str(writer.out / "tensorboard")))
    return sinks + tracker_sinks(cfg, writer.out, records)


def _checkpoint(step: int, cfg: RunConfig, setup: RunSetup, writer: RunWriter, progress: RunState,
                sums: StepMetrics, info: DistInfo, eval_batches: EvalBatches) -> dict[str, Any] | None:
    """Evaluate every domain, append the record, write records, weights and resume state (rank 0 only)."""
    ex, algorithm = cfg.execution, setup.algorithm
    means = sums.means(info.world_size if info.enabled else 1)  # (every rank: a collective under torchrun)
    eval_start = time.perf_counter()
    algorithm.on_checkpoint(step, online_val_loss(algorithm, setup.dataset, setup.splits, setup.train_envs, ex.device,
                                                  eval_batches))
    record = None
    if info.is_main:  # only rank 0 evaluates and writes
        splits, uda, sample = _eval_splits(step, cfg, setup)
        results = evaluate_domains(algorithm, setup.dataset, splits, setup.eval_transform, ex.device,
                                   ex.eval_batch_size, ex.num_workers, setup.test_envs, uda, eval_batches)
        # with --eval-sample, the images per split this record was computed on (None: every image)
        sampled = {"eval_sample": sample} if cfg.training.eval_sample is not None else {}
        steps_per_epoch = min(len(setup.splits[i][0]) / setup.hparams["batch_size"] for i in setup.train_envs)
        record = {"step": step, "epoch": step / steps_per_epoch, **means,
                  **results, **sampled, "eval_time": time.perf_counter() - eval_start,
                  "mem_gb": _peak_memory_gb(ex.device),
                  **algorithm.checkpoint_record(), "hparams": setup.hparams, "args": setup.record_args()}
        progress.records.append(record)
        val = train_domain_val_acc(record)
        best = val > progress.best_val
        progress.best_val = max(val, progress.best_val)
        progress.next_step = step + 1
        writer.checkpoint(step, progress.records, algorithm.inference_network(), best,
                          capture(step, algorithm, progress, setup.identity(), cfg.execution.compile))
    barrier(info)
    return record


def _eval_splits(step: int, cfg: RunConfig, setup: RunSetup) -> tuple[Any, Any, int | None]:
    """(splits, uda splits, sample size or None) a checkpoint evaluates: every image, or with --eval-sample
    the fixed seeded sample at an intermediate checkpoint (the last, or one an algorithm ends on, sees all)."""
    n = cfg.training.eval_sample
    if n is None or step >= setup.n_steps - 1 or setup.algorithm.stop_requested:
        return setup.splits, setup.uda, None
    splits, uda = sampled_splits(setup.splits, setup.uda, n, cfg.seeds.trial_seed)
    return splits, uda, n


def _peak_memory_gb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB on Linux


def main_log_config() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
