"""GeoMNIST facts that configs read without importing torch (`dgmoe.experiments.geo_config`)."""
from __future__ import annotations

#: the region GeoMNIST holds out by default (a region with few training neighbours)
DEFAULT_HELD_OUT = ("CentralAmerica",)
