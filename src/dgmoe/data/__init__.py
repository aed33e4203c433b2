"""dgmoe.data: DomainBed's multi-domain datasets, splits, augmentation, loaders and the uint8 data cache.

`get_dataset(name, data_dir, img_size)` is the one way to load a dataset; `list_datasets()` names them.
"""
from dgmoe.data.arrays import ArrayDomain
from dgmoe.data.base import Batch, MultiDomainDataset
from dgmoe.data.cache import default_cache_dir
from dgmoe.data.catalogue import (
    DATASETS,
    DatasetSpec,
    get_dataset,
    get_spec,
    get_transforms,
    list_datasets,
    prepare_dataset,
    register_folder_dataset,
)
from dgmoe.data.errors import (
    CacheError,
    DataDirNotFoundError,
    DatasetError,
    EmptyDomainError,
    LayoutError,
    TestEnvError,
    UnknownDatasetError,
    UnreadableImageError,
)
from dgmoe.data.loaders import TrainBatches, class_balanced_weights, eval_loader
from dgmoe.data.splits import check_test_envs, domain_splits, split_domain, uda_splits
from dgmoe.data.transforms import eval_transform, train_transform

__all__ = [
    "ArrayDomain", "Batch", "MultiDomainDataset", "default_cache_dir", "DATASETS", "DatasetSpec", "get_dataset",
    "get_spec", "get_transforms", "list_datasets", "prepare_dataset", "register_folder_dataset", "CacheError",
    "DataDirNotFoundError", "DatasetError", "EmptyDomainError", "LayoutError", "TestEnvError",
    "UnknownDatasetError", "UnreadableImageError", "TrainBatches", "class_balanced_weights", "eval_loader",
    "check_test_envs", "domain_splits", "split_domain", "uda_splits", "eval_transform", "train_transform",
]

from dgmoe.data import (
    shifts,  # noqa: E402,F401  (registers ImageNetShifts and the five DomainBed-OOP datasets)
    spawrious,  # noqa: E402,F401  (registers the six Spawrious challenges)
    wilds,  # noqa: E402,F401  (registers FMoW, FMoW-LAO, WILDSFMoW, iWildCam, Camelyon17)
)
from dgmoe.data.geo import geomnist, sentinel  # noqa: E402,F401  (registers GeoMNIST and Sentinel2Sample)
