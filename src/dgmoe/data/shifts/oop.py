"""DomainBed-OOP (Teterwak et al., "Is Large-scale Pretraining the Secret to Good Domain Generalization?",
ICLR 2025): DomainBed's five datasets with every image marked in-pretraining (IP) or out-of-pretraining (OOP)
by how well CLIP aligns it with its class name, so that a test domain's accuracy can be read on the images
pretraining did not already solve.

Declared as data: the split is the authors' release (huggingface.co/datasets/PTeterwak/DomainBed_OOP, first
published as PTeterwak/DomainBed_EasyHard), whose `hard/` archives hold the OOP images in DomainBed's layout.
Unpack them as `<data_dir>/DomainBed_OOP/hard/<DatasetDir>/<domain>/<class>/<image>` beside the full dataset
`<data_dir>/<DatasetDir>/...`. `<Dataset>-OOP` (PACS-OOP, VLCS-OOP, OfficeHome-OOP, TerraIncognita-OOP,
DomainNet-OOP) has the full dataset's domains, trained and held out as in DomainBed; every image carries the
metadata `pretraining` (1: listed in the OOP release, 0: IP, the rest), so every held-out domain records its
IP and OOP accuracy (`env{t}_acc_pretraining:OOP`, `env{t}_acc_pretraining:IP`, over the whole domain) beside
DomainBed's accuracy. An OOP image that the full dataset lacks is an error naming it: the split is matched by
`<domain>/<class>/<file name>`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from dgmoe.data.catalogue import DatasetSpec, get_spec, register_dataset, scan
from dgmoe.data.errors import DataDirNotFoundError, LayoutError
from dgmoe.data.folder import scan_folder, subsample_indices
from dgmoe.data.geo.images import GeoImageFiles
from dgmoe.metrics import GroupEvaluation
from dgmoe.seeding import seed_hash

OOP_DIR = "DomainBed_OOP/hard"
FIELD = "pretraining"
GROUPS = ("IP", "OOP")
BASES = ("PACS", "VLCS", "OfficeHome", "TerraIncognita", "DomainNet")
REFERENCE = "Teterwak et al., ICLR 2025 (DomainBed-OOP)"


def oop_root(base: DatasetSpec, data_dir) -> Path:
    assert base.dir_name is not None  # every base is a DomainBed folder dataset
    root = Path(data_dir).expanduser() / OOP_DIR / base.dir_name
    if not root.is_dir():
        raise DataDirNotFoundError(f"{base.name}-OOP: no {root} (unpack DomainBed-OOP's hard/{base.dir_name}.tar.gz "
                                   f"into {Path(data_dir) / OOP_DIR})")
    return root


def builder(base_name: str) -> Callable[..., tuple[list[GeoImageFiles], tuple[str, ...], str]]:
    def build(data_dir, img_size: int, n_per_domain: int | None, seed: int):
        base = get_spec(base_name)
        listing = scan(base, data_dir)
        root = oop_root(base, data_dir)
        oop = scan_folder(root, f"{base_name}-OOP", None)
        marked = {f"{d}/{f}" for i, d in enumerate(oop.domains) for f in oop.files[i]}
        known = {f"{d}/{f}" for i, d in enumerate(listing.domains) for f in listing.files[i]}
        stray = sorted(marked - known)
        if stray:
            raise LayoutError(f"{base_name}-OOP: {root / stray[0]} is not in {listing.root} "
                              f"({len(stray)} OOP image(s) the full dataset lacks)")
        envs = []
        for d, domain in enumerate(listing.domains):
            flags = np.array([f"{domain}/{f}" in marked for f in listing.files[d]], dtype=np.int64)
            keep = subsample_indices(len(flags), n_per_domain, seed_hash("subsample", f"{base_name}-OOP", d, seed))
            paths = listing.paths(d)
            envs.append(GeoImageFiles([paths[i] for i in keep], np.asarray(listing.labels[d])[keep],
                                      {FIELD: flags[keep]}, img_size))
        return envs, listing.classes, f"{base_name} from {listing.root}, OOP marks from {root}, decoded per item"
    return build


SPECS = tuple(register_dataset(DatasetSpec(
    f"{name}-OOP", "files", get_spec(name).domains, get_spec(name).num_classes, get_spec(name).dir_name,
    short_names=get_spec(name).short_names, n_steps=get_spec(name).n_steps,
    checkpoint_freq=get_spec(name).checkpoint_freq, builder=builder(name), hparams=get_spec(name).hparams,
    evaluation=GroupEvaluation(FIELD, GROUPS), class_names=get_spec(name).class_names,
    reference=f"{get_spec(name).reference}; {REFERENCE}"))
    for name in BASES)
