"""A recipe's soup parts (`Part.wise_ft`): the WiSE-FT soups `recipe launch` makes once the two parts they average
are done, through `dgmoe soup --method wise-ft`'s code (`dgmoe.posthoc.soup.make_soups`): for every run of the
zero-shot part, each run of the fine-tuned part that holds out the same domains with the same trial seed, at every
alpha of the part's grid and at the alpha training-domain validation picks, written as run folders into
`<output-dir>/<soup part>` (rows "ERM (WiSE-FT alpha=A)" and "ERM (WiSE-FT)"), which `dgmoe results --recipe`
reads as any part's runs. A soup already made of the same runs and weights is kept.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from dgmoe.errors import UsageError
from dgmoe.recipes.base import Part

Echo = Callable[[str], None]


def waiting(part: Part, output_dir: str | Path) -> str:
    """Why `part`'s soups cannot be made yet ('' when both of its parts' runs are all done)."""
    from dgmoe.posthoc.members import find_members  # (torch: loaded when a launch makes soups)

    assert part.wise_ft is not None
    for name in (part.wise_ft.fine_tuned, part.wise_ft.zero_shot):
        folder = Path(output_dir) / name
        members, left_out = find_members(folder) if folder.is_dir() else ([], [])
        if left_out:
            return f"{len(left_out)} run(s) of part {name} are not done or have no weights (e.g. {left_out[0].run_dir})"
        if not members:
            return f"part {name} has no finished run in {folder}"
    return ""


def make_wise_ft(part: Part, output_dir: str | Path, echo: Echo = print, device: str = "auto") -> list[Path]:
    """Every WiSE-FT soup of `part` (see the module docstring); none, with a line saying why, while a run of its
    two parts is not done (launch again once they are)."""
    from dgmoe.posthoc.config import SoupConfig
    from dgmoe.posthoc.members import find_members
    from dgmoe.posthoc.soup import make_soups

    assert part.wise_ft is not None
    why = waiting(part, output_dir)
    if why:
        echo(f"{part.name}: WiSE-FT soups not made yet: {why}; launch again once they are done")
        return []
    root = Path(output_dir)
    fine_tuned, out = root / part.wise_ft.fine_tuned, root / part.name
    held_out = {(m.dataset, m.test_envs, m.trial_seed) for m in find_members(fine_tuned)[0]}
    folders = []
    for zero_shot in find_members(root / part.wise_ft.zero_shot)[0]:
        if (zero_shot.dataset, zero_shot.test_envs, zero_shot.trial_seed) not in held_out:
            echo(f"{part.name}: {zero_shot.run_dir} has no fine-tuned run of part {part.wise_ft.fine_tuned} to pair "
                 "with (same dataset, held-out domains and trial seed); no soup of it")
            continue
        options = SoupConfig(methods=("wise-ft",), zero_shot=str(zero_shot.run_dir), alphas=part.wise_ft.alphas,
                             device=device)
        try:
            folders += make_soups(fine_tuned, out, options, echo)
        except UsageError as err:
            raise UsageError(f"recipe part {part.name}: {err}") from None
    return folders
