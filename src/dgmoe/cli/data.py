"""`dgmoe data`: list the catalogue, download and check a dataset, describe it, prepare its uint8 cache."""
from __future__ import annotations

import time
from typing import Any, cast

import click

from dgmoe.cli.config import DataCheckConfig, DataDownloadConfig, DataInfoConfig, DataPrepareConfig
from dgmoe.cli.options import ListFlagsGroup, build_config, config_options
from dgmoe.errors import DataMismatchError, UsageError


def _fail(e: Exception) -> None:
    raise e if isinstance(e, UsageError) else UsageError(str(e)) from None


@click.group("data", cls=ListFlagsGroup)
def command() -> None:
    """Datasets: catalogue, layout checks and the uint8 cache."""


@command.command("list")
def list_cmd() -> None:
    """The dataset catalogue with DomainBed's facts."""
    from dgmoe.data.catalogue import DATASETS, list_datasets

    click.echo(f"{'name':<19} {'kind':<10} {'dir':<16} {'classes':>7} {'steps':>6} {'ckpt':>5}  domains")
    for name in list_datasets():
        s = DATASETS.get(name)
        click.echo(f"{name:<19} {s.kind:<10} {s.dir_name or '-':<16} {s.num_classes or '?':>7} {s.n_steps:>6} "
                   f"{s.checkpoint_freq:>5}  {', '.join(s.domains) or '(from folders)'}")
        if s.layout:  # (no one folder: the '-' of its dir column)
            click.echo(f"{'':<19} folders under --data-dir: {s.layout}")
        for version in s.versions:
            click.echo(f"{'':<19} version: {version.name}")


@command.command("check")
@config_options(DataCheckConfig)
@click.pass_context
def check_cmd(ctx: click.Context, **kw: Any) -> None:
    """Which published version of a dataset FOLDER (<domain>/<class>/<image>) holds, and what differs from the
    closest one; reads no image. Exits 1 when the folder is doubtful (no image, another dataset's domains, a
    domain missing or empty, no known version of a dataset that has some), so that a script can gate on it.
    A dataset of another published layout (ImageNetShifts, the DomainBed-OOP lists, Spawrious; without --dataset,
    the one whose loader reads the folder) is listed as `dgmoe train --data-dir FOLDER` lists it, and what its
    loader misses is named."""
    cfg = build_config(DataCheckConfig, ctx, kw)
    folder, dataset = cfg.folder, cfg.dataset
    from pathlib import Path

    from dgmoe.data.catalogue import DATASETS, get_spec
    from dgmoe.data.versions import UNKNOWN, count_folder, identify

    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"FOLDER {folder} is not a directory (expected a dataset folder <domain>/<class>/<image>)")
    try:
        spec = get_spec(dataset) if dataset else None
    except KeyError as e:
        _fail(e)
    if spec is not None and spec.kind == "files":
        return _check_files(spec, root)
    candidates = [DATASETS.get(n) for n in DATASETS.names() if DATASETS.get(n).versions]
    if spec is None:
        named = [s for s in candidates if s.dir_name and (root / s.dir_name).is_dir()]
        if not named and not [s for s in candidates if root.name in (s.dir_name, s.name)]:
            readers = _files_readers(root)  # not a known folder dataset: one of another layout?
            if len(readers) > 1:
                raise UsageError(f"FOLDER {folder} is read by the loaders of {', '.join(readers)}; name one with "
                                 "--dataset")
            if readers:
                return _check_files(DATASETS.get(readers[0]), root)
        root = root / named[0].dir_name if len(named) == 1 and named[0].dir_name else root
    found = count_folder(root)
    if spec is None:
        by_name = [s for s in candidates if s.dir_name == root.name or s.name == root.name]
        overlap = sorted(candidates, key=lambda s: -len(set(s.domains) & set(found.counts)))
        spec = by_name[0] if by_name else (overlap[0] if overlap and set(overlap[0].domains) & set(found.counts)
                                           else None)
        if spec is None:
            files = [n for n in DATASETS.names() if DATASETS.get(n).kind == "files"]
            raise UsageError(f"FOLDER {folder}: no catalogue dataset with known versions has its name or domains; "
                             f"name one with --dataset ({', '.join(s.name for s in candidates)}; or one of another "
                             f"layout, read from the folder `train --data-dir` names: {', '.join(files)})")
    click.echo(f"{root}: {found.total:,} images in {len(found.counts)} domains ("
               + ", ".join(f"{d} {n:,}" for d, n in found.counts.items()) + ")")
    match = identify(found, spec.versions)
    click.echo(match.describe(spec.name))
    _print_record(root)
    mismatch = _domain_mismatch(found.counts, spec, [DATASETS.get(n) for n in DATASETS.names()])
    if mismatch:
        raise DataMismatchError(f"FOLDER {root} is not {spec.name} as the catalogue knows it: {mismatch}")
    if cfg.content:
        _check_content(root, spec)
    if spec.versions and match.version == UNKNOWN:
        raise DataMismatchError(f"FOLDER {root} matches no known version of {spec.name} (closest {match.closest}: "
                                + "; ".join(match.differences) + ")")


def _files_readers(root: Any) -> list[str]:
    """The datasets of another published layout (kind "files") whose loaders read `root` with images in every
    domain (what `data check` without --dataset takes a folder to be when no folder dataset has its name)."""
    from dgmoe.data.catalogue import DATASETS, DEFAULT_IMG_SIZE
    from dgmoe.data.errors import DatasetError

    readers = []
    for name in DATASETS.names():
        spec = DATASETS.get(name)
        if spec.kind != "files" or spec.builder is None:
            continue
        try:
            envs, _, _ = spec.builder(root, DEFAULT_IMG_SIZE, None, 0)
        except DatasetError:
            continue
        if all(len(env) for env in envs):
            readers.append(name)
    return readers


def _check_files(spec: Any, root: Any) -> None:
    """`data check` of a dataset of another published layout (kind "files"): its images listed by its own loader,
    as `dgmoe train --data-dir FOLDER` lists them (no image decoded); a folder the loader refuses (a folder or
    domain missing, a stray class folder) or a domain without images is doubtful (`DataMismatchError`)."""
    from dgmoe.data.catalogue import DEFAULT_IMG_SIZE
    from dgmoe.data.errors import DatasetError

    assert spec.builder is not None  # every "files" spec has one
    doubtful = f"FOLDER {root} is not {spec.name} as `dgmoe train --data-dir {root}` reads it"
    try:
        envs, _, _ = spec.builder(root, DEFAULT_IMG_SIZE, None, 0)
    except DatasetError as e:
        raise DataMismatchError(f"{doubtful}: {e}") from None
    counts = {d: len(env) for d, env in zip(spec.domains, envs)}
    click.echo(f"{root}: {sum(counts.values()):,} images in {len(counts)} domains ("
               + ", ".join(f"{d} {n:,}" for d, n in counts.items()) + f"), as --dataset {spec.name} reads them")
    field = spec.evaluation.field if spec.evaluation is not None else None
    marks = [getattr(env, "meta", {}).get(field) for env in envs] if field else []
    if marks and all(m is not None for m in marks):  # DomainBed-OOP: how many images each group holds
        names = spec.evaluation.group_names
        flat = [int(v) for m in marks if m is not None for v in m.tolist()]
        click.echo(f"{spec.name}: {field} " + ", ".join(f"{name} {flat.count(g):,}" for g, name in enumerate(names)))
    click.echo(f"{spec.name}: no known version to compare with")
    empty = [d for d, n in counts.items() if n == 0]
    if empty:
        raise DataMismatchError(f"{doubtful}: domain{'s' if len(empty) > 1 else ''} {', '.join(empty)} without "
                                "images")


def _print_record(root: Any) -> None:
    """Print the `.dgmoe-source.json` that `dgmoe data download` wrote into the folder, if any."""
    import json

    from dgmoe.data.content import SOURCE_RECORD

    path = root / SOURCE_RECORD
    if path.is_file():
        r = json.loads(path.read_text())
        click.echo(f"downloaded {r.get('date', '?')} from {r.get('source', '?')} ({', '.join(r.get('urls', []))}) "
                   f"by dgmoe {r.get('dgmoe_version', '?')}: archive sha256 "
                   + ", ".join(f"{k} {v}" for k, v in r.get("archives", {}).items())
                   + f"; content fingerprint {r.get('content_sha256', '?')}")


def _check_content(root: Any, spec: Any) -> None:
    """`--content`: the folder's content fingerprint against the versions' (exit 1 naming the files that differ
    from a version whose per-file digests are shipped)."""
    from dgmoe.data.content import file_differences, fingerprint, read_per_file

    found = fingerprint(root, progress=None)
    known = [v for v in spec.versions if v.content_sha256]
    for version in known:
        if version.content_sha256 == found.sha256:
            click.echo(f"official {spec.name} ({version.name}): content fingerprint {found.sha256}")
            return
    click.echo(f"content fingerprint {found.sha256} ({len(found.files):,} files, {found.nbytes:,} bytes): "
               f"unknown fingerprint, no version of {spec.name} that dgmoe knows has it")
    if not known:
        return
    diffs = [f"{v.name}: " + "; ".join(file_differences(found.files, read_per_file(v.content_files)))
             for v in known if v.content_files]
    raise DataMismatchError(f"FOLDER {root} is not the content of any known {spec.name} version ("
                            + ("; ".join(diffs) if diffs else "no per-file list shipped") + ")")


@command.command("download")
@config_options(DataDownloadConfig)
@click.pass_context
def download_cmd(ctx: click.Context, **kw: Any) -> None:
    """Download NAMES... into --data-dir (as <data-dir>/<DatasetDir>) from the sources dgmoe declares, tried in
    order; every published checksum is checked, the folder is unpacked beside its place and swapped in whole, its
    content fingerprint compared with the versions dgmoe knows and recorded in <DatasetDir>/.dgmoe-source.json.
    --list prints the sources (or why a dataset has none)."""
    cfg = build_config(DataDownloadConfig, ctx, kw)
    from dgmoe.data.sources import source_table

    if cfg.markdown and not cfg.list_sources:
        raise UsageError("--markdown goes with --list (it prints the source table in Markdown)")
    if cfg.list_sources:
        table = source_table()
        click.echo(table.markdown(title=False) if cfg.markdown else _text_table(table))
        if not cfg.markdown:
            click.echo("'not verified': the archive's layout was not checked by dgmoe's authors; what it gives is "
                       "checked on arrival (content fingerprint or image counts)")
        return
    if not cfg.names:
        raise UsageError("name at least one dataset to download (NAME...; see `dgmoe data download --list`)")
    if cfg.data_dir is None:
        raise UsageError("--data-dir is required: the folder to install into, as <data-dir>/<DatasetDir>")
    if (cfg.mirror or cfg.archive) and len(cfg.names) > 1:
        raise UsageError(f"--{'mirror' if cfg.mirror else 'archive'} stands for one dataset's files; "
                         f"name one dataset, not {len(cfg.names)}")
    if cfg.mirror and cfg.archive:
        raise UsageError("--mirror and --archive both name where the files come from: give one")
    from dgmoe.data.install import find, install

    for name in cfg.names:  # every name checked before anything is fetched
        find(name)
    for name in cfg.names:
        done = install(name, cfg.data_dir, mirror=cfg.mirror, archive=cfg.archive, force=cfg.force,
                       echo=lambda line: click.echo(line, err=True))
        click.echo(f"{done.folder}: {done.verdict}")


def _text_table(table: Any) -> str:
    """The source table as a terminal reads it: each dataset, then its sources one per line."""
    lines = []
    for name, folder, serves, source, kind, size, checksum, licence, layout, note in table.cells():
        if name:
            lines.append(f"{name} -> <data-dir>/{folder}/ (for {serves})" if folder != "-" else f"{name} ({serves})")
        lines.append(f"  {source}" if kind == "-" else
                     f"  {source} [{kind}]: size {size}; checksum {checksum}; {licence}; layout {layout}")
        lines += [f"     note: {note}"] if note else []
    return "\n".join(lines)


def _domain_mismatch(counts: dict[str, int], spec: Any, specs: list[Any]) -> str | None:
    """What is wrong with a folder's domains for `spec` (None: nothing): no image at all, another catalogue
    dataset's domains, a domain missing or empty; a dataset that declares no domains (ImageFolder) takes any."""
    if not counts or not sum(counts.values()):
        return "it holds no image (expected <domain>/<class>/<image>)"
    if not spec.domains:
        return None
    have, want = set(counts), set(spec.domains)
    if not have & want:
        owners = [s.name for s in specs if s.domains and set(s.domains) == have] or \
            [s.name for s in specs if s.domains and have <= set(s.domains) and s.name != spec.name]
        whose = f"; they are {owners[0]}'s" if owners else ""
        return (f"its domains ({', '.join(sorted(have))}) are not {spec.name}'s ({', '.join(spec.domains)}){whose}")
    missing = sorted(want - have)
    empty = sorted(d for d in want & have if counts[d] == 0)
    parts = ([f"domain{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing"] if missing else []) + \
        ([f"domain{'s' if len(empty) > 1 else ''} {', '.join(empty)} without images"] if empty else [])
    return "; ".join(parts) or None


@command.command("info")
@config_options(DataInfoConfig)
@click.pass_context
def info_cmd(ctx: click.Context, **kw: Any) -> None:
    """Domains, classes and image counts (per domain and class) of a dataset, without decoding images."""
    cfg = build_config(DataInfoConfig, ctx, kw)
    dataset, data_dir, img_size, cache_dir = cfg.dataset, cfg.data_dir, cfg.img_size, cfg.cache_dir
    from dgmoe.data import cache as cache_mod
    from dgmoe.data.catalogue import DEFAULT_IMG_SIZE, cache_name, get_dataset, get_spec, scan
    from dgmoe.data.errors import CacheError, DatasetError

    try:
        spec = get_spec(dataset)
        if spec.kind == "folder":
            listing = scan(spec, data_dir)
            domains, classes = listing.domains, listing.classes
            per_class = [listing.class_counts(d) for d in range(len(domains))]
            source = str(listing.root)
        else:
            ds = get_dataset(dataset, data_dir, img_size)
            domains, classes = tuple(ds.domains), tuple(ds.classes)
            labels = [cast(Any, env).labels for env in ds.environments]  # every non-folder domain keeps them
            per_class = [[int((y == c).sum()) for c in range(len(classes))] for y in labels]
            how = {"wilds": "WILDS files, decoded per item", "files": "image files, decoded per item"}.get(
                spec.kind, "built in memory")
            source = f"{how}, {ds.input_shape[0]}x{ds.input_shape[1]}x{ds.input_shape[2]}"
    except (DatasetError, KeyError) as e:
        _fail(e)
    click.echo(f"{spec.name}: {len(domains)} domains, {len(classes)} classes, {sum(map(sum, per_class))} images "
               f"({source}); n_steps {spec.n_steps}, checkpoint_freq {spec.checkpoint_freq}")
    width = max(8, *(len(c) for c in classes[:30]))
    click.echo(f"{'env':<4} {'domain':<14} {'total':>7}  " + " ".join(f"{c[:width]:>{width}}" for c in classes[:30])
               + ("  ..." if len(classes) > 30 else ""))
    for d, (name, counts) in enumerate(zip(domains, per_class)):
        click.echo(f"{d:<4} {name:<14} {sum(counts):>7}  " + " ".join(f"{n:>{width}}" for n in counts[:30]))
    if spec.kind == "folder":
        size = img_size or DEFAULT_IMG_SIZE
        folder = cache_mod.cache_folder(cache_dir, cache_name(spec, listing), size)
        try:
            cache_mod.read_cache(folder, spec.name, size, listing)
            state = "valid"
        except CacheError as e:
            state = f"not usable ({e})"
        click.echo(f"cache at {size} px: {state}")


@command.command("prepare")
@config_options(DataPrepareConfig)
@click.pass_context
def prepare_cmd(ctx: click.Context, **kw: Any) -> None:
    """Decode a folder dataset once into uint8 arrays at --img-size (one .npy per domain + manifest.json)."""
    cfg = build_config(DataPrepareConfig, ctx, kw)
    dataset, data_dir, img_size, cache_dir, workers, force = (cfg.dataset, cfg.data_dir, cfg.img_size, cfg.cache_dir,
                                                              cfg.workers, cfg.force)
    from dgmoe.data.catalogue import prepare_dataset
    from dgmoe.data.errors import DatasetError

    start = time.perf_counter()
    try:
        info = prepare_dataset(dataset, data_dir, img_size, cache_dir, workers=workers, force=force, progress=True)
    except (DatasetError, KeyError, ValueError) as e:
        _fail(e)
    verb = "built" if info.seconds > 0 else "already valid"
    click.echo(f"{dataset} cache {verb}: {info.folder} ({sum(info.counts)} images, {info.nbytes / 2**20:.1f} MiB, "
               f"{time.perf_counter() - start:.1f} s)")
