"""The text of `dgmoe recipe list` and `dgmoe recipe show`: everything read from the recipe's declaration."""
from __future__ import annotations

from typing import Any, Mapping

from dgmoe.data.catalogue import evaluation_envs, get_spec
from dgmoe.document import Cell as TableCell
from dgmoe.document import Table
from dgmoe.recipes.base import AVG, SELECTION_NAMES, SELECTION_SHORT, SWEEP_KINDS, Cell, Part, Recipe, column_keys
from dgmoe.recipes.plan import SMOKE, row_model, row_parts


def list_table(recipes: list[Recipe]) -> str:
    """One line per recipe: name, paper and table, kind, runnable rows, title."""
    rows: list[tuple[str, ...]] = [(r.name, f"{r.paper.split(' (')[0]} {r.table}", r.kind,
             f"{sum(not x.unavailable for x in r.rows)}/{len(r.rows)}", r.title) for r in recipes]
    rows.insert(0, ("recipe", "table", "kind", "rows run", "what"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(f"{v:<{w}}" for v, w in zip(row, widths)) + "  " + row[4] for row in rows)


def _number(cell: Cell, added: bool = False) -> TableCell:
    if cell.value is None:
        return TableCell("-" if added else "(plot)")
    return TableCell(mean=cell.value, se=cell.se, decimals=cell.digits)


def _title(cell: Cell) -> str:
    name = cell.dataset if cell.column == AVG else f"{cell.dataset} {cell.column}".strip()
    if cell.source:
        return name.removeprefix("DomainNet ")
    return name + (f" ({SELECTION_SHORT[cell.selection]})" if cell.selection else "")


def published_tables(recipe: Recipe) -> list[Table]:
    """The paper's numbers as printed: one table (single-source: one per training domain, titled "trained on
    DOMAIN"; otherwise untitled), a column per dataset and metric, the rows as the paper names them."""
    out = []
    for source in dict.fromkeys(c.source for r in recipe.rows for c in r.cells):
        keys = column_keys(recipe.rows, lambda c: c.source == source)
        titles = {(c.dataset, c.column, c.selection): _title(c) for r in recipe.rows for c in r.cells}
        cited = any(r.source for r in recipe.rows)
        rows = []
        for row in recipe.rows:
            mine = {(c.dataset, c.column, c.selection): c for c in row.cells if c.source == source}
            if mine:
                mark = " *" if row.quoted else " (not run)" if row.unavailable else " +" if row.added else ""
                splits = ", ".join(dict.fromkeys(c.split for c in mine.values()))
                rows.append([row.label + mark, *(_number(mine[k], bool(row.added)) if k in mine else "" for k in keys),
                             *([splits, row.source.short if row.source else row.added or ""] if cited else [])])
        extra = ["test split", "source"] if cited else []
        out.append(Table.make(f"trained on {source}" if source else "", ["Row", *(titles[k] for k in keys), *extra],
                              rows))
    return out


def _settings(settings: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def describe_part(part: Part) -> str:
    """A part's grid and shared settings in one paragraph (a soup part: what it averages)."""
    if part.wise_ft is not None:
        soup = part.wise_ft
        return (f"  {part.name}: WiSE-FT soups of part {soup.fine_tuned}'s runs against part {soup.zero_shot}'s (the "
                f"same dataset, held-out domains and trial seed) on {', '.join(part.datasets)} x "
                f"{', '.join(part.models)}, alpha {', '.join(f'{a:g}' for a in soup.alphas)} and the alpha "
                "training-domain validation picks; made by the launch once both parts' runs are done")
    held = ("the evaluation sets held out" if all(evaluation_envs(d) for d in part.datasets) else
            f"held-out sets {[list(s) for s in part.test_env_sets]}" if part.test_env_sets else
            "each domain held out alone" if part.single_test_envs else "each domain and each pair held out")
    steps = []
    for dataset in part.datasets:
        spec = get_spec(dataset)
        merged = {**part.settings, **part.per_dataset.get(dataset, {})}
        freq = merged.get("checkpoint_freq", spec.checkpoint_freq)
        steps.append(f"{dataset} {merged.get('steps', spec.n_steps)}/{freq}")
    lines = [f"  {part.name}: {', '.join(part.datasets)} x {', '.join(part.algorithms)} x {', '.join(part.models)}; "
             f"{held}; {part.n_hparams} hparams setting(s) x {part.n_trials} trial(s)",
             f"    steps/checkpoint freq: {', '.join(steps)}"]
    weights = [f"{k} (backbone)" for k in [part.pretrained] if k] + [f"{k} (location encoder)"
                                                                     for k in [part.location_weights] if k]
    if weights:
        lines.append(f"    weights: {', '.join(weights)}")
    if part.settings:
        lines.append(f"    settings: {_settings(part.settings)}")
    for dataset, settings in part.per_dataset.items():
        lines.append(f"    {dataset}: {_settings(settings)}")
    return "\n".join(lines)


def show_text(recipe: Recipe) -> str:
    """What `dgmoe recipe show NAME` prints."""
    selection = SELECTION_NAMES.get(recipe.selection or "", "none")
    lines = [f"{recipe.name}: {recipe.paper}, {recipe.table}: {recipe.title}",
             f"kind: {recipe.kind}; model selection: {selection}", "",
             "Published numbers (* the paper quotes the row from other work; (not run): dgmoe cannot produce it"
             + ("; +: a row dgmoe adds, with no published number" if any(r.added for r in recipe.rows) else "")
             + "):"]
    for table in published_tables(recipe):
        lines += ["", *([f"{table.title}:"] if table.title else []), table.markdown(title=False)]
    lines += ["", "Rows:"]
    for row in recipe.rows:
        where = (f"not run: {row.unavailable}" if row.unavailable else
                 f"part {', '.join(p.name for p in row_parts(recipe, row))}" if recipe.kind in SWEEP_KINDS else
                 "run in this process")
        quoted = (f"; the paper quotes it from {row.quoted}" if row.quoted else "") + (
            f"; {row.added}" if row.added else "")
        lines.append(f"  {row.label}: {row.algorithm} on {row.model} ({where}{quoted})")
        if row.source is not None:
            lines.append(f"    source: {row.source.text}")
        if row.best_of:
            lines.append(f"    each column the best of {len(row.best_of)} rows: {', '.join(row.best_of)}")
    if recipe.parts:
        lines += ["", "Parts (each a sweep into <output-dir>/<part>):", *(describe_part(p) for p in recipe.parts)]
    if recipe.cost:
        c = recipe.cost
        lines += ["", f"Measurement: {c.domains} domains x {c.batch_per_domain} images at {c.img_size} px, "
                      f"{c.warmup} warm-up + {c.steps} timed steps per row, ratios to the {c.reference} row"]
    if recipe.synthetic:
        lines += ["", f"Experiment: {recipe.synthetic}, seeds {list(recipe.synthetic_seeds)}"]
    if recipe.weights:
        lines += ["", "Weights (--pretrained KEY=FILE, or a folder holding these files):"]
        lines += [f"  {w.key}: {w.hint} ({w.source})" for w in recipe.weights]
    lines += ["", "Smoke scale (--scale smoke, CPU): " + smoke_text(recipe)]
    if recipe.notes:
        lines += ["", "Notes:", *(f"  - {n}" for n in recipe.notes)]
    lines += ["", "Launch: " + launch_line(recipe), f"Results: dgmoe results runs/recipes/{recipe.name} --recipe "
              f"{recipe.name}"]
    return "\n".join(lines)


def smoke_text(recipe: Recipe) -> str:
    if recipe.kind == "cost":
        return (f"every row timed for 5 steps on 2 x 2 random images at 28 px on narrow backbones "
                f"({_settings(SMOKE.model_kwargs)}, patch {SMOKE.patch_size}).")
    if recipe.kind == "synthetic":
        return "2,000 training samples, 1 epoch, seed 0, no noisy grid."
    models = ", ".join(dict.fromkeys(f"{r.model} -> {row_model(r, 'smoke')}" for r in recipe.rows
                                     if not r.unavailable))
    folders = sorted({d for p in recipe.parts for d in p.datasets if d in SMOKE.folder_stand_ins})
    data = SMOKE.stand_ins[recipe.kind] + "".join(f" ({d}: its stand-in folders, written into {SMOKE.data_dir}/)"
                                                  for d in folders)
    heads = (f"text heads from the '{SMOKE.prompt_templates}' templates, " if any(
        "prompt_templates" in p.settings for p in recipe.parts) else "")
    return (f"data {data} ({SMOKE.n_per_domain} images per domain), {heads}backbones {models} "
            f"({_settings(SMOKE.model_kwargs)}, patch {SMOKE.patch_size}), {SMOKE.steps} steps, 1 hparams setting, "
            "1 trial, one held-out set, " + (f"a dense checkpoint of each backbone's dense twin (written into "
                                             f"{SMOKE.weights_dir}/) for the paper's weights." if recipe.weights
                                             else "no pretrained weights."))


def launch_line(recipe: Recipe) -> str:
    weights = " ".join(f"--pretrained {w.key}={w.hint}" for w in recipe.weights)
    data = " --data-dir DATA" if recipe.kind in SWEEP_KINDS else ""
    return " ".join(f"dgmoe recipe launch {recipe.name}{data} {weights}".split())
