"""Location encoders phi(m) for metadata routing (MoGE §2.1): spherical harmonics + SIREN (SatCLIP), an ID
embedding, frozen plug-in encoders and WRAP (D3G_WRAP), in one registry."""
from dgmoe.models.location.encoders import (
    LOCATION_ENCODERS,
    build_location_encoder,
    list_location_encoders,
    load_pretrained_location_encoder,
    register_location_encoder,
    save_location_encoder,
)
from dgmoe.models.location.spherical_harmonics import SphericalHarmonics, real_spherical_harmonics
from dgmoe.models.location.wrap import WrapEncoder, wrap_features  # registers 'wrap'

__all__ = ["LOCATION_ENCODERS", "SphericalHarmonics", "build_location_encoder", "list_location_encoders",
           "load_pretrained_location_encoder", "real_spherical_harmonics", "register_location_encoder",
           "save_location_encoder", "WrapEncoder", "wrap_features"]
