"""WiSE-FT (Wortsman et al., "Robust fine-tuning of zero-shot models", CVPR 2022, Eq. 1): the weight-space
ensemble theta_alpha = (1 - alpha) * theta_0 + alpha * theta_1 of the zero-shot network theta_0 and a network
fine-tuned from it, theta_1, for every alpha of a grid (mlfoundations/wise-ft `_merge` without Fisher weights).

`dgmoe soup --method wise-ft --zero-shot RUN_DIR [--alpha 0,0.1,...,1]` pairs the zero-shot run with every
fine-tuned run under RUNS_DIR that holds out the same domains with the same trial seed and shares its
architecture and initialisation, its classifier head included (kind, prompt templates, class names, text tower:
theta_0 is the zero-shot network the run was fine-tuned from), and writes one soup run per alpha (rows
"ALG (WiSE-FT alpha=A)": the whole curve) and one whose alpha is the grid's best by training-domain validation
accuracy (row "ALG (WiSE-FT)", the first of equal scores in grid order; its record lists every alpha's
validation accuracy). Interpolation is done in float64 and cast back: at alpha 0 the weights are theta_0 bit for
bit, at 1 theta_1, so their predictions are the zero-shot and the fine-tuned run's.
"""
from __future__ import annotations

from typing import Sequence

import torch

from dgmoe.algorithms.averaging import weighted_mean
from dgmoe.errors import UsageError
from dgmoe.posthoc.members import Member, check_shared, head_difference


def interpolate(theta_0: dict[str, torch.Tensor], theta_1: dict[str, torch.Tensor],
                alpha: float) -> dict[str, torch.Tensor]:
    """(1 - alpha) * theta_0 + alpha * theta_1: the weighted mean of `dgmoe.algorithms.averaging` with weights
    (1 - alpha, alpha), theta_1 the reference (float tensors in float64 and cast to theta_1's dtype, theta_1's
    integer buffers)."""
    if set(theta_0) != set(theta_1):
        differ = sorted(set(theta_0) ^ set(theta_1))
        raise UsageError(f"WiSE-FT: the two weight files hold different tensors ({', '.join(differ[:3])}, ...)")
    return weighted_mean([theta_0, theta_1], [1.0 - alpha, alpha], reference=1)


def pairs(members: Sequence[Member], zero_shot: Member) -> list[tuple[Member, Member]]:
    """(fine-tuned run, zero-shot run) for every member that holds out the zero-shot run's domains with its trial
    seed; refuses, in one line, a pair that does not share a head, an architecture and an initialisation, or no
    pair."""
    found = []
    for m in members:
        if m.run_dir.resolve() == zero_shot.run_dir.resolve():
            continue
        if (m.dataset, m.test_envs, m.trial_seed) == (zero_shot.dataset, zero_shot.test_envs, zero_shot.trial_seed):
            head = head_difference(zero_shot, m)
            if head:  # (before the architecture: another head kind is another architecture too)
                raise UsageError(f"--zero-shot {zero_shot.run_dir}: {m.run_dir} was not fine-tuned from its "
                                 f"zero-shot head ({head}); WiSE-FT interpolates from the weights a run started "
                                 "from: fine-tune with the zero-shot run's --head, --prompt-templates and text "
                                 "tower, or put the run in another folder")
            check_shared([zero_shot, m])
            found.append((m, zero_shot))
    if not found:
        raise UsageError(f"--zero-shot {zero_shot.run_dir}: no fine-tuned run holds out its domains "
                         f"{list(zero_shot.test_envs)} of {zero_shot.dataset} with its trial seed "
                         f"{zero_shot.trial_seed}")
    return found
