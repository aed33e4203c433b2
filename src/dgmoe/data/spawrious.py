"""Spawrious (Lynch et al., 2023): four dog breeds whose backgrounds are spuriously correlated with the breed,
in six challenges, declared from the published folder layout as DomainBed's `SpawriousBenchmark` reads it.

Layout: `<data_dir>/spawrious224/{0,1}/<location>/<breed>/<image>` (locations beach, desert, dirt, jungle,
mountain, snow; breeds bulldog, corgi, dachshund, labrador, labels in that order). Every challenge has the
domains `Test`, `SC_group_1`, `SC_group_2` (env 0 is the test domain, as in DomainBed):

- one-to-one (O2O): breed k sits on background `group[k]` in 97% (SC_group_1, from folder 0) and 87%
  (SC_group_2, from folder 1) of its 3,168 training images, the rest of every breed on the `filler`
  background; the test domain shows breed k on `test[k]`, from both folders.
- many-to-many (M2M): each pair of breeds swaps a pair of backgrounds between the two training domains
  (bulldog/dachshund on group[0]/group[1], labrador/corgi on group[2]/group[3]; 3,168 images per breed and
  domain, folder 0); the test domain swaps the test backgrounds the same way.

DomainBed takes the first n files in `os.listdir` order (which depends on the file system); dgmoe takes the
first n in sorted order, so a folder gives the same images everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dgmoe.data.catalogue import DatasetSpec, register_dataset
from dgmoe.data.errors import DataDirNotFoundError
from dgmoe.data.folder import FolderDomain, subsample_indices
from dgmoe.seeding import seed_hash

SPAWRIOUS_DIR = "spawrious224"
SPAWRIOUS_DOMAINS = ("Test", "SC_group_1", "SC_group_2")
SPAWRIOUS_CLASSES = ("bulldog", "corgi", "dachshund", "labrador")
#: the breeds in the order of a challenge's backgrounds (DomainBed's combinations)
BREED_ORDER = ("bulldog", "dachshund", "labrador", "corgi")
PER_BREED = 3168
O2O_SHARES = (0.97, 0.87)
#: M2M: the background (index into group or test) of each breed in SC_group_1 and SC_group_2
M2M_PAIRS = ((0, 1), (1, 0), (2, 3), (3, 2))
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass(frozen=True)
class Challenge:
    """One Spawrious challenge: one-to-one (with a `filler` background) or many-to-many."""

    name: str
    group: tuple[str, str, str, str]
    test: tuple[str, str, str, str]
    filler: str | None = None  # O2O only

    @property
    def one_to_one(self) -> bool:
        return self.filler is not None

    def parts(self) -> list[list[tuple[str, str, int | None]]]:
        """Per domain (Test, SC_group_1, SC_group_2): (folder relative to the root, breed, first n or all)."""
        test: list[tuple[str, str, int | None]] = []
        train: list[list[tuple[str, str, int | None]]] = [[], []]
        for k, breed in enumerate(BREED_ORDER):
            if self.one_to_one:
                test += [(f"{f}/{self.test[k]}", breed, None) for f in (0, 1)]
                for e, share in enumerate(O2O_SHARES):
                    train[e].append((f"{e}/{self.group[k]}", breed, int(share * PER_BREED)))
            else:
                test += [(f"0/{self.test[i]}", breed, None) for i in M2M_PAIRS[k]]
                for e, i in enumerate(M2M_PAIRS[k]):
                    train[e].append((f"0/{self.group[i]}", breed, PER_BREED))
        if self.one_to_one:
            for e, share in enumerate(O2O_SHARES):
                train[e] += [(f"{e}/{self.filler}", b, PER_BREED - int(share * PER_BREED)) for b in BREED_ORDER]
        return [test, *train]


CHALLENGES = (
    Challenge("SpawriousO2O_easy", ("desert", "jungle", "dirt", "snow"), ("dirt", "snow", "desert", "jungle"), "beach"),
    Challenge("SpawriousO2O_medium", ("mountain", "beach", "dirt", "jungle"), ("jungle", "dirt", "beach", "snow"),
              "desert"),
    Challenge("SpawriousO2O_hard", ("jungle", "mountain", "snow", "desert"), ("mountain", "snow", "desert", "jungle"),
              "beach"),
    Challenge("SpawriousM2M_easy", ("desert", "mountain", "dirt", "jungle"), ("dirt", "jungle", "mountain", "desert")),
    Challenge("SpawriousM2M_medium", ("beach", "snow", "mountain", "desert"), ("desert", "mountain", "beach", "snow")),
    Challenge("SpawriousM2M_hard", ("dirt", "jungle", "snow", "beach"), ("snow", "beach", "dirt", "jungle")),
)


def spawrious_root(data_dir: str | Path | None) -> Path:
    """`<data_dir>/spawrious224`, or `data_dir` itself when it is that folder (it holds `0/`)."""
    if data_dir is None:
        raise DataDirNotFoundError(f"Spawrious needs --data-dir, the folder holding {SPAWRIOUS_DIR}/")
    root = Path(data_dir)
    root = root if (root / "0").is_dir() else root / SPAWRIOUS_DIR
    if not (root / "0").is_dir():
        raise DataDirNotFoundError(f"Spawrious: no {SPAWRIOUS_DIR}/0/ under {data_dir} (expected "
                                   f"{SPAWRIOUS_DIR}/{{0,1}}/<location>/<breed>/<image>)")
    return root


def builder(challenge: Challenge) -> Callable[..., tuple[list[FolderDomain], tuple[str, ...], str]]:
    """The catalogue builder of `challenge`: `(data_dir, img_size, n_per_domain, seed)` -> (domains, classes,
    description); images are decoded per item."""
    def build(data_dir: str | Path | None, img_size: int, n_per_domain: int | None,
              seed: int) -> tuple[list[FolderDomain], tuple[str, ...], str]:
        root = spawrious_root(data_dir)
        domains = []
        for d, (name, part) in enumerate(zip(SPAWRIOUS_DOMAINS, challenge.parts())):
            paths: list[str] = []
            labels: list[int] = []
            for folder, breed, limit in part:
                where = root / folder / breed
                if not where.is_dir():
                    raise DataDirNotFoundError(f"{challenge.name}: {where} is missing (domain {name})")
                files = sorted(p for p in where.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)[:limit]
                paths += [str(p) for p in files]
                labels += [SPAWRIOUS_CLASSES.index(breed)] * len(files)
            keep = subsample_indices(len(paths), n_per_domain, seed_hash("subsample", challenge.name, d, seed))
            domains.append(FolderDomain([paths[i] for i in keep], [labels[i] for i in keep], img_size))
        return domains, SPAWRIOUS_CLASSES, f"{challenge.name} from {root}, decoded per item"
    return build


#: the catalogue's declaration of the six challenges (DomainBed's schedule: 5,001 steps, a checkpoint every 100)
SPECS = tuple(register_dataset(DatasetSpec(
    c.name, "files", SPAWRIOUS_DOMAINS, len(SPAWRIOUS_CLASSES), SPAWRIOUS_DIR, checkpoint_freq=100,
    builder=builder(c), reference="Lynch et al., Spawrious, 2023 (DomainBed's SpawriousBenchmark)"))
    for c in CHALLENGES)
