"""Flag combinations that would run something other than their name, refused in one line before anything is
written. No torch: `dgmoe.engine.precheck` asks before torch starts (with the hyperparameters the command line
gave), `dgmoe.engine.setup.prepare_run` asks again once the hyperparameters are resolved (the defaults, a random
draw) and the schedule is known.

- **FLYP, CLIPood and LPFT with `--steps 0`**: no update is made, so the run is the zero-shot head evaluated
  untrained (`--algorithm ERM --steps 0`) under a fine-tuning method's name.
- **FLYP, CLIPood and LPFT with `--peft linear`**: FLYP's head is rewritten from its text tower and CLIPood's is
  CLIP's frozen class-name embeddings, so with the image tower frozen FLYP trains its text tower alone and CLIPood
  trains nothing; LP-FT's fine-tuning phase would train the head only, i.e. a linear probe throughout.
- **LPFT whose probe covers the whole run** (`linear_steps` >= the run's steps: it never fine-tunes; an empty
  probe is refused by `linear_steps`' own check, `dgmoe.algorithms.lp_ft`).
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from dgmoe.errors import UsageError

#: the algorithms whose name promises training of the tower (a zero-shot run or a linear probe is another method)
TOWER_TRAINING = ("FLYP", "CLIPood", "LPFT")
#: why `--peft linear` is not the method, per algorithm
LINEAR_PEFT = {
    "FLYP": "FLYP's head is rewritten from its text tower, so with the image tower frozen only the text tower "
            "would train (not FLYP's both towers)",
    "CLIPood": "CLIPood's head is CLIP's frozen class-name embeddings, so with the image tower frozen nothing "
               "would train",
    "LPFT": "LP-FT's fine-tuning phase would train the head only: a linear probe throughout, not LP-FT",
}


def check_combination(algorithm: str, steps: int | None, peft_mode: str,
                      hparams: Mapping[str, Any] | None = None, steps_said: str | None = None) -> None:
    """Refuse (`UsageError`, one line) a combination that would run something other than `algorithm`'s name.
    `steps`: the run's updates (None: not known yet, the catalogue's); `hparams`: the ones given or resolved
    (only `linear_steps` is read); `steps_said`: how a message names the steps ['--steps N'])."""
    if algorithm not in TOWER_TRAINING:
        return
    if steps == 0:
        raise UsageError(f"--steps 0 with --algorithm {algorithm} makes no update: that is the zero-shot head "
                         f"evaluated untrained, a zero-shot run; run it as --algorithm ERM --steps 0, or give "
                         f"{algorithm} steps to train")
    if peft_mode == "linear":
        raise UsageError(f"--peft linear with --algorithm {algorithm}: {LINEAR_PEFT[algorithm]}; use --peft full "
                         f"(or lora, adapter, ...) for {algorithm}, or --algorithm ERM --peft linear for a linear "
                         "probe")
    probe = (hparams or {}).get("linear_steps")
    if algorithm == "LPFT" and isinstance(probe, int) and not isinstance(probe, bool):
        check_lp_ft_phases(probe, steps, steps_said)


def check_lp_ft_phases(linear_steps: int, steps: int | None, steps_said: str | None = None) -> None:
    """LP-FT's probe is followed by at least one fine-tuning update (an empty probe, `linear_steps` < 1, is
    refused by the hyperparameter's own check, `dgmoe.algorithms.lp_ft`)."""
    if steps is not None and 1 <= linear_steps and steps <= linear_steps:
        fix = (f"give --steps above {linear_steps}" + (f" or a shorter probe, e.g. --hparams "
                                                        f"{json.dumps({'linear_steps': max(1, steps // 2)})}"
                                                        if steps >= 2 else ""))
        raise UsageError(f"{steps_said or f'--steps {steps}'} with --algorithm LPFT: its linear probe takes the first "
                         f"{linear_steps} updates (linear_steps), so the run would never fine-tune (a linear probe "
                         f"labelled LP-FT); {fix}")

