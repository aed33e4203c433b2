"""`dgmoe report RUNS_DIR`: one self-contained static HTML page (PNG figures embedded as data URIs).

The page holds, in order: the results tables of `dgmoe.report.tables` (per selection method), a cost
table computed from the records (mean train step time and peak memory per run, as GMoE Table 16 reports),
any Markdown files passed with `include` (e.g. the documented cost table), and per run: its accuracy per
step and whatever `dgmoe analyze` left in `<run>/analysis/` (routing maps, expert usage, attention maps,
CUB-DG histograms: every `*.png` and `*.md` there). Nothing is fetched when the page is opened.
"""
from __future__ import annotations

import base64
import html
import json
import re
import warnings
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from dgmoe.report import plots

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;
padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f0f3f7}td:first-child,th:first-child{text-align:left}
img{max-width:100%;height:auto;border:1px solid #eee;margin:.3em 0}
code,pre{background:#f6f8fa;border-radius:3px;padding:.1em .3em}pre{padding:.6em;overflow-x:auto}
section.run{border-top:2px solid #dde;margin-top:2em}h1{border-bottom:3px solid #35c}
.meta{color:#555;font-size:.9em}
"""


# --- a small Markdown renderer: headings, pipe tables, fenced code, bullet lists, paragraphs ----------------

def _inline(text: str) -> str:
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"<em>\1</em>", out)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(lines: list[str]) -> str:
    head, body = _cells(lines[0]), [_cells(line) for line in lines[2:]]
    rows = ["<tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>"]
    rows += ["<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body]
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def markdown_to_html(text: str, heading_offset: int = 0) -> str:
    """Render the Markdown subset dgmoe writes (tables from `to_markdown`, headings, lists, code, text)."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1:j])) + "</code></pre>")
            i = j + 1
        elif re.match(r"^#{1,6} ", line):
            level = min(6, len(line) - len(line.lstrip("#")) + heading_offset)
            out.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
            i += 1
        elif line.lstrip().startswith("|") and i + 1 < len(lines) and re.match(r"^\s*\|?\s*:?-{2,}", lines[i + 1]):
            j = i
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                j += 1
            out.append(_table(lines[i:j]))
            i = j
        elif re.match(r"^\s*[-*] ", line):
            items = []
            while i < len(lines) and re.match(r"^\s*[-*] ", lines[i]):
                item = [lines[i].strip()[2:]]
                i += 1
                while i < len(lines) and lines[i].startswith("  ") and lines[i].strip() \
                        and not re.match(r"^\s*[-*] ", lines[i]):
                    item.append(lines[i].strip())  # a wrapped list item
                    i += 1
                items.append(f"<li>{_inline(' '.join(item))}</li>")
            out.append("<ul>" + "".join(items) + "</ul>")
        elif not line.strip():
            i += 1
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not re.match(r"^(#{1,6} |```|\s*\||\s*[-*] )", lines[i]):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{_inline(' '.join(para))}</p>")
    return "\n".join(out)


# --- page parts ---------------------------------------------------------------------------------------------

def img_tag(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _run_dirs(runs_dir: Path) -> list[Path]:
    return sorted(p.parent for p in runs_dir.rglob("results.jsonl"))


def _read_records(run: Path) -> list[dict]:
    rows = []
    for line in (run / "results.jsonl").read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                warnings.warn(f"{run / 'results.jsonl'}: skipping a line that is not JSON", stacklevel=2)
    return rows


def _count_params(run: Path) -> int | None:
    try:
        from dgmoe.engine.checkpoint import build_network, read_run_config

        return sum(p.numel() for p in build_network(read_run_config(run)).parameters())
    except Exception:  # an old or foreign run folder: the column is just left empty
        return None


def cost_table(runs: Sequence[Path], root: Path, count_params: bool = True) -> str:
    """Markdown: per run, parameters, mean train step time and peak memory from its records."""
    lines = ["| run | model | params (M) | step time (s) | peak memory (GB) | steps |", "|---|---|---|---|---|---|"]
    for run in runs:
        recs = _read_records(run)
        if not recs:
            continue
        args = recs[-1].get("args", {})
        st = [r["step_time"] for r in recs if isinstance(r.get("step_time"), (int, float))]
        mem = [r["mem_gb"] for r in recs if isinstance(r.get("mem_gb"), (int, float))]
        n = _count_params(run) if count_params else None
        lines.append(f"| {run.relative_to(root)} | {args.get('model', '')} | "
                     f"{'' if n is None else f'{n / 1e6:.2f}'} | {f'{sum(st) / len(st):.4f}' if st else ''} | "
                     f"{f'{max(mem):.2f}' if mem else ''} | {recs[-1].get('step', '')} |")
    return "\n".join(lines)


def _run_section(run: Path, root: Path) -> str:
    recs = _read_records(run)
    rel = str(run.relative_to(root)) or "."
    parts = [f'<section class="run"><h2>Run <code>{html.escape(rel)}</code></h2>']
    if recs:
        args = recs[-1].get("args", {})
        meta = ", ".join(f"{k}: {html.escape(str(args[k]))}" for k in ("dataset", "algorithm", "model", "test_envs",
                                                                      "trial_seed", "hparams_seed") if k in args)
        done = "finished" if (run / "done").exists() else "not finished"
        parts.append(f'<p class="meta">{meta}; {len(recs)} checkpoints, {done}</p>')
        flat = pd.DataFrame([{k: v for k, v in r.items() if not isinstance(v, (dict, list))} for r in recs])
        parts.append(img_tag(plots.png_bytes(plots.plot_accuracy_curves(flat, f"accuracy per step: {rel}")),
                             f"accuracy per step of {rel}"))
    analysis = run / "analysis"
    if analysis.is_dir():
        for md in sorted(analysis.glob("*.md")):
            parts.append(markdown_to_html(md.read_text(), heading_offset=0))
        for png in sorted(analysis.glob("*.png")):
            parts.append(f"<h4>{html.escape(png.stem)}</h4>" + img_tag(png.read_bytes(), f"{rel}: {png.stem}"))
    parts.append("</section>")
    return "\n".join(parts)


def build_report(runs_dir: str | Path, out: str | Path | None = None, selection: str = "all",
                 include: Iterable[str | Path] = (), title: str = "dgmoe report", count_params: bool = True) -> Path:
    """Write the HTML report of every run under `runs_dir` to `out` (default `runs_dir/report.html`)."""
    from dgmoe.report.collect import load_records
    from dgmoe.report.tables import results_tables

    root = Path(runs_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"runs directory {root} does not exist or is not a directory")
    runs = _run_dirs(root)
    if not runs:
        raise FileNotFoundError(f"no results.jsonl under {root}: nothing to report (train a run first)")
    body = [f"<h1>{html.escape(title)}</h1>", f'<p class="meta">runs directory: <code>{html.escape(str(root))}</code>; '
            f"{len(runs)} run(s)</p>"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unfinished runs are reported per run below
        records = load_records(root)
    if len(records):
        body.append(markdown_to_html(results_tables(records, selection, latex=False), heading_offset=1))
    else:
        body.append("<p>No finished run yet: no results table.</p>")
    body += ["<h2>Cost</h2>", markdown_to_html(cost_table(runs, root, count_params))]
    for path in include:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"--include file {path} does not exist")
        body.append(markdown_to_html(path.read_text(), heading_offset=1))
    body += [_run_section(run, root) for run in runs]
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
    out_path = Path(out) if out is not None else root / "report.html"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(page, encoding="utf-8")
    return out_path
