"""SWAD: dense stochastic weight averaging over the validation-loss valley (Cha et al., NeurIPS 2021, Alg. 1).

The weights of *every* iteration are averaged over the window [t_s, t_e] chosen from the validation loss
E_i of the online weights at checkpoints i:

- start: the first checkpoint i with E_{i-N_s+1} = min(E_{i-N_s+1}, ..., E_i) (the loss stopped
  decreasing); then t_s = i - N_s + 1 and the tolerance l = r * mean(E_{i-N_s+1}, ..., E_i);
- end: the first later checkpoint i with l < min(E_{i-N_e+1}, ..., E_i) (the loss left the valley); then
  t_e = i - N_e. If that never happens, t_e is the last checkpoint.

Checkpoint i stands for its segment, the iterations since checkpoint i - 1, as in the official code (the
averaged model includes the whole segment ending at t_s). Defaults follow the official configuration:
N_s = 3, N_e = 6, r = 1 + 0.3. Every iteration in the window has equal weight. Differences from the
official code: it weights segments equally (the same for equal-length segments) and, with N_e > N_s,
extends the window backwards over earlier segments under the tolerance, in which case the start segment
enters the average twice; dgmoe follows Algorithm 1.

The engine must pass the validation loss of the online weights (`predict_online`) to `on_checkpoint`;
`predict` evaluates the SWAD average as it stands (committed segments plus those still inside the
tolerance window), or the online weights before the valley is found. State lives in buffers: the current
segment's running mean, up to max(N_s, N_e) pending segment means with their losses and iteration counts,
and the running mean of the committed segments. Every mean follows the one averaging rule of
`dgmoe.algorithms.averaging`: the running means are updated in place (`running_mean_`), the average evaluated
is the mean of the committed and pending segment means weighted by their iteration counts (`mean_of`, in float64).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from dgmoe.algorithms.averaging import copy_integer_buffers, flatten, load_flat, mean_of, num_averaged, running_mean_
from dgmoe.algorithms.base import Metrics, frozen_copy
from dgmoe.algorithms.erm import ERM
from dgmoe.algorithms.registry import register_algorithm
from dgmoe.data.base import Batch
from dgmoe.hparams import HParam, fixed, non_negative, positive

SEARCH, AVERAGING, ENDED = 0, 1, 2


class LossValley(nn.Module):
    """Algorithm 1 of SWAD on flat weight vectors, one segment per checkpoint."""

    # buffers, registered in __init__
    segment: torch.Tensor
    segment_count: torch.Tensor
    segment_first: torch.Tensor
    slots: torch.Tensor
    slot_count: torch.Tensor
    slot_loss: torch.Tensor
    slot_first: torch.Tensor
    slot_last: torch.Tensor
    n_pending: torch.Tensor
    losses: torch.Tensor
    n_checkpoints: torch.Tensor
    committed: torch.Tensor
    committed_count: torch.Tensor
    phase: torch.Tensor
    threshold: torch.Tensor
    start_step: torch.Tensor
    end_step: torch.Tensor

    def __init__(self, size: int, n_converge: int = 3, n_tolerance: int = 6, tolerance_ratio: float = 0.3):
        super().__init__()
        if n_converge < 1 or n_tolerance < 1:
            raise ValueError(f"SWAD patience must be >= 1, got N_s={n_converge}, N_e={n_tolerance}")
        self.n_converge, self.n_tolerance, self.ratio = n_converge, n_tolerance, tolerance_ratio
        k = max(n_converge, n_tolerance)
        self.register_buffer("segment", torch.zeros(size))
        self.register_buffer("segment_count", torch.zeros((), dtype=torch.long))
        self.register_buffer("segment_first", torch.zeros((), dtype=torch.long))
        self.register_buffer("slots", torch.zeros(k, size))
        self.register_buffer("slot_count", torch.zeros(k, dtype=torch.long))
        self.register_buffer("slot_loss", torch.zeros(k, dtype=torch.float64))
        self.register_buffer("slot_first", torch.zeros(k, dtype=torch.long))
        self.register_buffer("slot_last", torch.zeros(k, dtype=torch.long))
        self.register_buffer("n_pending", torch.zeros((), dtype=torch.long))
        self.register_buffer("losses", torch.zeros(k, dtype=torch.float64))  # last k losses, newest last
        self.register_buffer("n_checkpoints", torch.zeros((), dtype=torch.long))
        self.register_buffer("committed", torch.zeros(size))
        self.register_buffer("committed_count", torch.zeros((), dtype=torch.long))
        self.register_buffer("phase", torch.zeros((), dtype=torch.long))
        self.register_buffer("threshold", torch.zeros((), dtype=torch.float64))
        self.register_buffer("start_step", torch.full((), -1, dtype=torch.long))
        self.register_buffer("end_step", torch.full((), -1, dtype=torch.long))

    @torch.no_grad()
    def add_iterate(self, weights: torch.Tensor, step: int) -> None:
        if int(self.phase) == ENDED:
            return
        if int(self.segment_count) == 0:
            self.segment_first.fill_(step)
        self.segment_count += 1
        running_mean_([self.segment], [weights.to(self.segment)], int(self.segment_count))

    def _drop_oldest(self, n: int) -> None:
        m = int(self.n_pending)
        for buf in (self.slots, self.slot_count, self.slot_loss, self.slot_first, self.slot_last):
            buf[: m - n] = buf[n:m].clone()
        self.n_pending.fill_(m - n)

    def _commit_oldest(self, n: int) -> None:
        for j in range(n):
            c = int(self.slot_count[j])
            if c:
                total = int(self.committed_count) + c
                running_mean_([self.committed], [self.slots[j]], total, c)
                self.committed_count.fill_(total)
                if int(self.start_step) < 0:
                    self.start_step.fill_(int(self.slot_first[j]))
                self.end_step.fill_(int(self.slot_last[j]))
        self._drop_oldest(n)

    def _commit_through(self, index: int) -> None:
        """Commit the pending segments whose checkpoint index is <= index."""
        i, m = int(self.n_checkpoints), int(self.n_pending)
        oldest = i - m + 1
        self._commit_oldest(max(0, min(m, index - oldest + 1)))

    @torch.no_grad()
    def end_segment(self, val_loss: float, step: int) -> None:
        """Close the current segment at a checkpoint with the online weights' validation loss."""
        if int(self.phase) == ENDED:
            return
        self.n_checkpoints += 1
        i, m, k = int(self.n_checkpoints), int(self.n_pending), len(self.slot_count)
        if m == k:
            self._drop_oldest(1)
            m -= 1
        self.slots[m] = self.segment
        self.slot_count[m] = self.segment_count
        self.slot_loss[m] = val_loss
        self.slot_first[m] = self.segment_first
        self.slot_last[m] = step
        self.n_pending.fill_(m + 1)
        self.losses.copy_(torch.cat([self.losses[1:], self.losses.new_tensor([val_loss])]))
        self.segment.zero_()
        self.segment_count.zero_()
        ns, ne = self.n_converge, self.n_tolerance
        if int(self.phase) == SEARCH:
            if int(self.n_pending) > ns:
                self._drop_oldest(int(self.n_pending) - ns)
            window = self.slot_loss[: int(self.n_pending)]
            if i >= ns and bool(window[0] <= window.min()):
                self.phase.fill_(AVERAGING)
                self.threshold.fill_((1.0 + self.ratio) * float(window.mean()))
                self._commit_through(i + 1 - ne)
        elif i >= ne and bool(self.losses[-ne:].min() > self.threshold):
            self.phase.fill_(ENDED)
            self._commit_through(i - ne)
            self._drop_oldest(int(self.n_pending))
        else:
            self._commit_through(i + 1 - ne)

    def average(self) -> torch.Tensor | None:
        """The SWAD weights as they stand, or None before the valley is found."""
        if int(self.phase) == SEARCH:
            return None
        members, counts = [self.committed], [int(self.committed_count)]
        if int(self.phase) == AVERAGING:
            m = int(self.n_pending)
            members, counts = members + list(self.slots[:m]), counts + self.slot_count[:m].tolist()
        kept = [(t, c) for t, c in zip(members, counts) if c]
        return mean_of([t for t, _ in kept], [c for _, c in kept]) if kept else None


@register_algorithm
class SWAD(ERM):
    DESCRIPTION = "ERM with dense weight averaging over the validation-loss valley (needs the validation loss)"
    REFERENCE = "Cha et al., SWAD: Domain Generalization by Seeking Flat Minima, NeurIPS 2021"
    NEEDS_VAL_LOSS = True
    HPARAMS = {
        "swad_n_converge": HParam(3, fixed(3), positive),
        "swad_n_tolerance": HParam(6, fixed(6), positive),
        "swad_tolerance_ratio": HParam(0.3, fixed(0.3), non_negative),
    }
    has_average: torch.Tensor  # buffer, registered in __init__

    def __init__(self, network, num_classes, num_domains, hparams):
        super().__init__(network, num_classes, num_domains, hparams)
        hp = self.hparams
        self.valley = LossValley(num_averaged(network), hp["swad_n_converge"], hp["swad_n_tolerance"],
                                 hp["swad_tolerance_ratio"])
        self.network_swad = frozen_copy(network)
        self.register_buffer("has_average", torch.zeros((), dtype=torch.bool))

    def train(self, mode: bool = True) -> "SWAD":
        super().train(mode)
        self.network_swad.eval()
        return self

    def _update(self, minibatches: list[Batch], step: int) -> Metrics:
        out = super()._update(minibatches, step)
        self.valley.add_iterate(flatten(self.network), step)
        return out

    def on_checkpoint(self, step: int, val_loss: float | None) -> None:
        if val_loss is None:
            raise ValueError("SWAD needs the validation loss of the online weights at every checkpoint "
                             "(held-out splits of the training domains); got None")
        self.valley.end_segment(float(val_loss), step)
        average = self.valley.average()
        if average is not None:
            load_flat(self.network_swad, average)
            copy_integer_buffers(self.network, self.network_swad)
            self.has_average.fill_(True)

    def inference_network(self) -> nn.Module:
        return self.network_swad if bool(self.has_average) else self.network

    def predict(self, x: torch.Tensor, meta: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        return self.logits(x, meta, self.inference_network())

    @property
    def stop_requested(self) -> bool:
        return int(self.valley.phase) == ENDED

    def checkpoint_record(self) -> dict[str, float]:
        v = self.valley
        start, end = int(v.start_step), int(v.end_step)
        if int(v.phase) == AVERAGING and int(v.n_pending):
            start = start if start >= 0 else int(v.slot_first[0])
            end = int(v.slot_last[int(v.n_pending) - 1])
        return {"swad_phase": int(v.phase), "swad_start_step": start, "swad_end_step": end,
                "swad_threshold": float(v.threshold)}
