"""Geographic metadata for MoGE: location encoders, metadata validation and WILDS-style metrics.

Datasets (`dgmoe.geo.wilds`, `dgmoe.geo.benchmark`, `dgmoe.geo.sentinel`), the ERM+LE baseline
(`dgmoe.geo.baselines`), MoGE's fallbacks (`dgmoe.geo.fallbacks`), routing analysis (`dgmoe.geo.analysis`)
and the benchmark protocol (`dgmoe.geo.experiment`) are imported explicitly where needed.
"""
from dgmoe.geo.encoders import (LOCATION_ENCODERS, build_location_encoder, list_location_encoders,
                                load_pretrained_location_encoder, register_location_encoder, save_location_encoder)
from dgmoe.geo.metadata import MetadataError
from dgmoe.geo.metrics import accuracy, evaluate_groups, macro_f1, select_by_worst_group, worst_group_accuracy
from dgmoe.geo.spherical_harmonics import SphericalHarmonics, real_spherical_harmonics

__all__ = [
    "LOCATION_ENCODERS", "MetadataError", "SphericalHarmonics", "accuracy", "build_location_encoder",
    "evaluate_groups", "list_location_encoders", "load_pretrained_location_encoder", "macro_f1",
    "real_spherical_harmonics", "register_location_encoder", "save_location_encoder", "select_by_worst_group",
    "worst_group_accuracy",
]
