"""Progress: a tqdm bar with loss and throughput on a terminal, plain lines otherwise."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, mode: str, start: int, total: int, images_per_step: int):
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.mode, self.images_per_step = mode, images_per_step
        self.start_time, self.start = time.perf_counter(), start
        self.bar = None
        if mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True)

    def _throughput(self, step: int) -> float:
        elapsed = time.perf_counter() - self.start_time
        return (step + 1 - self.start) * self.images_per_step / max(elapsed, 1e-9)

    def update(self, step: int, metrics: dict[str, float]) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{metrics.get('loss', float('nan')):.4f}",
                                 img_s=f"{self._throughput(step):.0f}", refresh=False)

    def checkpoint(self, record: dict, test_envs: list[int]) -> None:
        if self.mode == "none":
            return
        n = len(record["args"]["domains"])
        train_out = [record[f"env{i}_out_acc"] for i in range(n) if i not in test_envs]
        test_in = [record[f"env{i}_in_acc"] for i in test_envs]
        line = (f"step {record['step']:6d}  loss {record.get('loss', float('nan')):.4f}  "
                f"val(train-domains out) {sum(train_out) / len(train_out):.4f}  "
                f"test(in) {sum(test_in) / len(test_in):.4f}  {self._throughput(record['step']):.0f} img/s")
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
