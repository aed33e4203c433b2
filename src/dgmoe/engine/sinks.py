"""Log sinks: where a run's progress goes besides its records.

Records always go to `results.jsonl` (the run writer, `dgmoe.engine.rundir`); a sink is an optional view
with three hooks, `step` after every training step, `checkpoint` after every evaluation and `close`. dgmoe
ships the console (a tqdm bar on a terminal, timed lines otherwise, both from `dgmoe.engine.progress` and
also in the run's `train.log`) and TensorBoard; a new sink is a subclass passed to `train(..., sinks=[...])`.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from dgmoe.engine.progress import Progress, duration, resolve_mode
from dgmoe.engine.runlog import RunLog
from dgmoe.errors import UsageError
from dgmoe.records import train_domain_val_acc


class Sink:
    """A view of the run's progress; every hook is optional."""

    def step(self, step: int, metrics: Mapping[str, float], train_seconds: float) -> None:
        """After training step `step`; `train_seconds` is that step's training time (no evaluation).
        `metrics` converts a value still on the GPU when it is read (a host synchronisation): read them
        only when they are shown."""

    def checkpoint(self, record: dict[str, Any]) -> None:
        """After the evaluation at a checkpoint, with the record just appended to results.jsonl."""

    def close(self) -> None:
        pass


class ConsoleSink(Sink):
    """Loss, training throughput (evaluation excluded) and the time left, through `Progress`.

    `bar`: a tqdm bar; `lines` (any output that is not a terminal: logs, Slurm, sweep jobs): a line after the
    first step, then every `every_s` seconds, and a line per checkpoint; `none`: the log file only (the lines
    still go to train.log)."""

    def __init__(self, run_log: RunLog, mode: str, start: int, total: int, checkpoint_steps: Iterable[int],
                 images_per_step: int, test_envs: Sequence[int], every_s: float = 20.0):
        self.run_log, self.mode = run_log, resolve_mode(mode)  # type: ignore[arg-type]
        self.start, self.total, self.images_per_step = start, total, images_per_step
        # checkpoints at or after a step: a `Schedule` counts them without listing (any --steps starts at once)
        self._count_from = getattr(checkpoint_steps, "count_from", None) or (
            lambda step, steps=sorted(checkpoint_steps): sum(1 for s in steps if s >= step))
        self.next_checkpoint_from = start
        self.test_envs = list(test_envs)
        self.train_seconds, self.steps_done = 0.0, 0
        self.recent_seconds, self.recent_steps = 0.0, 0  # since the last line: the first step's warm-up passes
        self.eval_seconds, self.evals_done = 0.0, 0
        if self.mode == "none":
            run_log.console = False
        self.progress = Progress(total, mode="bar" if self.mode == "bar" else "lines", every_s=every_s,
                                 initial=start, unit="step", write=run_log.say)
        self.bar = self.progress.bar
        if self.bar is not None:
            run_log.write_console = self.bar.write

    def images_per_second(self) -> float:
        return self.steps_done * self.images_per_step / self.train_seconds if self.train_seconds else float("nan")

    def recent_images_per_second(self) -> float:
        """img/s over the steps since the last line (then restarts): the current pace, which the first
        steps' one-off costs (CUDA context, cuDNN and compile warm-up) no longer weigh down."""
        seconds, steps = self.recent_seconds, self.recent_steps
        self.recent_seconds, self.recent_steps = 0.0, 0
        return steps * self.images_per_step / seconds if seconds else float("nan")

    def seconds_left(self, step: int) -> float:
        steps_left = self.total - 1 - step
        per_step = self.train_seconds / max(self.steps_done, 1)
        per_eval = self.eval_seconds / self.evals_done if self.evals_done else 0.0
        return steps_left * per_step + self._count_from(self.next_checkpoint_from) * per_eval

    def step(self, step: int, metrics: Mapping[str, float], train_seconds: float) -> None:
        self.train_seconds += train_seconds
        self.steps_done += 1
        self.recent_seconds += train_seconds
        self.recent_steps += 1

        def line() -> str:  # read only when a line is printed: the loss may still be on the GPU
            loss = metrics.get("loss", float("nan"))
            rate = self.recent_images_per_second()
            return (f"step {step + 1}/{self.total}  loss {loss:.4f}  {rate:.1f} img/s training  "
                    f"{self.images_per_step / rate:.3f} s/step  eta {duration(self.seconds_left(step))}")

        def postfix() -> dict[str, str]:
            return {"loss": f"{metrics.get('loss', float('nan')):.4f}",
                    "img_s": f"{self.recent_images_per_second():.0f}"}
        self.progress.update(1, line, postfix_fn=postfix if self.bar is not None else None)

    def checkpoint(self, record: dict[str, Any]) -> None:
        step = record["step"]
        self.next_checkpoint_from = max(self.next_checkpoint_from, step + 1)
        self.eval_seconds += record.get("eval_time", 0.0)
        self.evals_done += 1
        domains = record["args"]["domains"]
        tests = "  ".join(f"test {domains[i]} {record[f'env{i}_in_acc']:.4f}" for i in self.test_envs)
        loss = f"loss {record['loss']:.4f}  " if "loss" in record else "untrained  "  # (--steps 0)
        self.run_log.say(f"checkpoint step {step}  {loss}"
                         f"val (training domains, out) {train_domain_val_acc(record, self.test_envs):.4f}  {tests}  "
                         f"eval {record.get('eval_time', 0.0):.1f} s  eta {duration(self.seconds_left(step))}")
        self.progress.mark()

    def close(self) -> None:
        if self.bar is not None:
            self.progress.close()
            self.run_log.write_console = self.run_log._print


class TensorBoardSink(Sink):
    """Every numeric field of every record as a scalar under `<run>/tensorboard` (`--tensorboard`)."""

    def __init__(self, log_dir: str):
        self.writer = tensorboard_writer_class()(log_dir)

    def checkpoint(self, record: dict[str, Any]) -> None:
        for k, v in record.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.writer.add_scalar(k, v, record["step"])

    def close(self) -> None:
        self.writer.close()


def tensorboard_writer_class():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise UsageError("--tensorboard needs the tensorboard package: pip install 'dgmoe[tensorboard]'") from exc
    return SummaryWriter
