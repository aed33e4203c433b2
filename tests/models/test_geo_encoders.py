"""Location encoders: spherical harmonics (scipy, quadrature, SatCLIP vectors), SIREN, id embedding, plug-in."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dgmoe.data.geo.metadata import MetadataError
from dgmoe.models.location.encoders import (
    FrozenLocationEncoder,
    LocationIdEmbedding,
    SHSirenEncoder,
    build_location_encoder,
    list_location_encoders,
    load_pretrained_location_encoder,
    save_location_encoder,
)
from dgmoe.models.location.siren import SirenNet
from dgmoe.models.location.spherical_harmonics import SphericalHarmonics, real_spherical_harmonics


def _scipy_real_sh(degree: int, m: int, theta: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """Real SH without the Condon-Shortley phase from scipy's complex SH (which has it)."""
    special = pytest.importorskip("scipy.special")
    am = abs(m)
    if hasattr(special, "sph_harm_y"):
        y = special.sph_harm_y(degree, am, theta, phi)
    else:  # scipy < 1.15: sph_harm(m, n, azimuth, polar)
        y = special.sph_harm(am, degree, phi, theta)
    if m == 0:
        return y.real
    part = y.real if m > 0 else y.imag
    return math.sqrt(2.0) * (-1) ** am * part


@pytest.mark.parametrize("degree,m", [(0, 0), (1, -1), (1, 0), (1, 1), (2, -2), (3, 2), (5, -3), (7, 7), (9, -9),
                                      (9, 0), (14, 5), (20, -11)])
def test_spherical_harmonics_match_scipy(degree, m):
    rng = np.random.default_rng(degree * 100 + m)
    theta = np.concatenate([rng.uniform(0, np.pi, 50), [0.0, np.pi, np.pi / 2]])
    phi = np.concatenate([rng.uniform(0, 2 * np.pi, 50), [0.3, 1.0, 2 * np.pi]])
    ours = real_spherical_harmonics(torch.from_numpy(theta), torch.from_numpy(phi), degree + 1)
    ours = ours[:, degree * degree + degree + m]
    np.testing.assert_allclose(ours.numpy(), _scipy_real_sh(degree, m, theta, phi), atol=1e-6, rtol=0)


@pytest.mark.parametrize("num_degrees", [3, 10, 25])
def test_spherical_harmonics_orthonormal_by_quadrature(num_degrees):
    # Gauss-Legendre in cos(theta) x uniform azimuth integrates products of degree < 2L exactly.
    x, w = np.polynomial.legendre.leggauss(num_degrees + 1)
    n_phi = 2 * num_degrees + 1
    phi = np.arange(n_phi) * 2 * np.pi / n_phi
    theta_g, phi_g = np.meshgrid(np.arccos(x), phi, indexing="ij")
    weights = (w[:, None] * np.full(n_phi, 2 * np.pi / n_phi)[None, :]).reshape(-1)
    y = real_spherical_harmonics(torch.from_numpy(theta_g.reshape(-1)), torch.from_numpy(phi_g.reshape(-1)),
                                 num_degrees).numpy()
    gram = (y * weights[:, None]).T @ y
    np.testing.assert_allclose(gram, np.eye(num_degrees**2), atol=1e-9)


def test_satclip_test_vectors_with_pi_quirk():
    sh = SphericalHarmonics(3, satclip_pi_quirk=True, dtype=torch.float64)
    lonlat = torch.tensor([[0.0, 0.0], [-87.6298, 41.8781], [151.2093, -33.8688]])
    expected = torch.tensor([
        [0.886227, 0, 0, -0.488603, 0, 0, -0.990832, 0, 0.546274],
        [0.886227, 0.363486, -1.02468, -0.015045, -0.025027, -0.542569, 0.333773, 0.022458, -0.301807],
        [0.886227, -0.195387, 0.855439, 0.355544, -0.317921, -0.243481, -0.067647, 0.44306, 0.201904],
    ], dtype=torch.float64)
    torch.testing.assert_close(sh(lonlat), expected, atol=2e-6, rtol=0)
    plain = SphericalHarmonics(3, dtype=torch.float64)(lonlat)
    m0 = [0, 2, 6]
    torch.testing.assert_close(plain[:, m0] * math.pi, expected[:, m0], atol=2e-6, rtol=0)


def test_sh_finite_at_poles_and_dateline():
    sh = SphericalHarmonics(40)
    out = sh(torch.tensor([[0.0, 90.0], [180.0, -90.0], [-180.0, 0.0]]))
    assert out.shape == (3, 1600) and torch.isfinite(out).all()


def test_siren_structure_and_init():
    torch.manual_seed(0)
    net = SirenNet(100, 256, 256, num_layers=2)
    assert sorted(net.state_dict()) == ["last_layer.bias", "last_layer.weight", "layers.0.bias", "layers.0.weight",
                                        "layers.1.bias", "layers.1.weight"]
    assert net.layers[0].weight.abs().max() <= 1 / 100 and net.layers[0].weight.abs().max() > 0.009
    assert net.layers[1].weight.abs().max() <= math.sqrt(6 / 256) + 1e-7
    assert net.layers[0].w0 == 30.0 and net.layers[1].w0 == 1.0
    x = torch.randn(8, 100)
    net.eval()
    torch.testing.assert_close(net(x), net(x))
    manual = net.last_layer.weight @ torch.sin(net.layers[1].weight @ torch.sin(30 * (net.layers[0].weight @ x.T
             + net.layers[0].bias[:, None])) + net.layers[1].bias[:, None]) + net.last_layer.bias[:, None]
    torch.testing.assert_close(net(x), manual.T, atol=1e-5, rtol=1e-5)
    net.train()
    assert not torch.allclose(net(x), net(x))  # dropout p = 0.5 on the pre-activations


def _meta(lat, lon):
    return {"lat": torch.tensor(lat, dtype=torch.float32), "lon": torch.tensor(lon, dtype=torch.float32)}


def test_registry_and_sh_siren_shapes():
    assert {"sh", "sh_siren", "location_id", "pretrained"} <= set(list_location_encoders())
    enc = build_location_encoder("sh_siren")
    assert enc.out_dim == 256 and enc.posenc.out_dim == 100
    assert enc.eval()(_meta([10.0, -20.0], [5.0, 170.0])).shape == (2, 256)
    with pytest.raises(KeyError, match="Did you mean: sh_siren"):
        build_location_encoder("sh_sirne")


def test_bad_coordinates_raise_clear_errors():
    enc = SHSirenEncoder().eval()
    with pytest.raises(MetadataError, match=r"meta\['lat'\] must be degrees in \[-90, 90\].*row 1, value 95"):
        enc(_meta([10.0, 95.0], [0.0, 0.0]))
    with pytest.raises(MetadataError, match=r"meta\['lon'\].*wrap longitudes"):
        enc(_meta([10.0, 0.0], [0.0, 200.0]))
    with pytest.raises(MetadataError, match=r"meta\['lat'\] is missing \(NaN/inf\) in 1 of 2 rows.*missing='unknown'"):
        enc(_meta([float("nan"), 0.0], [0.0, 0.0]))
    with pytest.raises(MetadataError, match=r"missing \['lon'\]"):
        enc({"lat": torch.zeros(2)})
    with pytest.raises(MetadataError, match="meta=None"):
        enc(None)


def test_missing_coordinates_explicit_unknown_path():
    enc = SHSirenEncoder(missing="unknown").eval()
    out = enc(_meta([float("nan"), 10.0, 20.0], [0.0, float("nan"), 30.0]))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0], enc.unknown)
    torch.testing.assert_close(out[1], enc.unknown)
    assert not torch.allclose(out[2], enc.unknown)
    with pytest.raises(MetadataError, match="out of range"):
        enc(_meta([float("nan"), 91.0], [0.0, 0.0]))


def test_location_id_embedding_unknown_slot():
    torch.manual_seed(0)
    enc = LocationIdEmbedding(num_ids=10, dim=8, id_dropout=0.0)
    enc.train()
    enc({"location_id": torch.tensor([0, 1, 2])})  # ids seen in training become known
    enc.eval()
    rows = enc.rows({"location_id": torch.tensor([0, 2, 5, 9, -1])})
    assert rows.tolist() == [0, 2, 10, 10, 10]
    out = enc({"location_id": torch.tensor([5, 9])})
    torch.testing.assert_close(out[0], enc.embedding.weight[10])
    torch.testing.assert_close(out[1], enc.embedding.weight[10])
    out.sum().backward()
    assert enc.embedding.weight.grad[10].abs().sum() > 0 and enc.embedding.weight.grad[5].abs().sum() == 0
    state = enc.state_dict()
    assert state["seen"].tolist()[:4] == [True, True, True, False]
    with pytest.raises(MetadataError, match=r"must be in \[0, 10\) or -1.*value 12"):
        enc({"location_id": torch.tensor([1, 12])})


def test_location_id_dropout_trains_unknown_row_and_known_ids():
    torch.manual_seed(0)
    enc = LocationIdEmbedding(num_ids=4, dim=4, id_dropout=0.5, known_ids=[0, 1])
    enc.train()
    rows = enc.rows({"location_id": torch.tensor([0, 1, 2, 3] * 50)})
    assert (rows == 4).float().mean() > 0.6  # ids 2, 3 are not known (explicit list), half of 0, 1 dropped
    assert not enc.seen[2]


def _fake_satclip_checkpoint(path, legendre_polys=4, capacity=16, embed_dim=8):
    torch.manual_seed(1)
    net = SirenNet(legendre_polys**2, capacity, embed_dim, num_layers=2)
    state = {f"model.location.nnet.{k}": v for k, v in net.state_dict().items()}
    state["model.visual.conv1.weight"] = torch.randn(2, 3, 1, 1)
    state["logit_scale"] = torch.tensor(2.6)
    torch.save({"state_dict": state, "hyper_parameters": {"legendre_polys": legendre_polys, "capacity": capacity},
                "epoch": 3}, path)
    return net


def test_pretrained_satclip_checkpoint_loads_frozen(tmp_path):
    path = tmp_path / "satclip-fake.ckpt"
    net = _fake_satclip_checkpoint(path).eval()
    enc = load_pretrained_location_encoder(path)
    assert isinstance(enc, FrozenLocationEncoder) and enc.out_dim == 8
    assert all(not p.requires_grad for p in enc.parameters())
    enc.train()
    assert not enc.encoder.training
    meta = _meta([41.8781, -33.8688], [-87.6298, 151.2093])
    lonlat = torch.stack([meta["lon"], meta["lat"]], 1)
    expected = net(SphericalHarmonics(4, satclip_pi_quirk=True)(lonlat))
    torch.testing.assert_close(enc(meta), expected)
    assert build_location_encoder("pretrained", path=path).out_dim == 8


def test_pretrained_roundtrip_and_bad_files(tmp_path):
    enc = SHSirenEncoder(num_degrees=3, hidden=8, out_dim=4, dropout=0.0).eval()
    save_location_encoder(enc, tmp_path / "le.safetensors")
    loaded = load_pretrained_location_encoder(tmp_path / "le.safetensors")
    meta = _meta([1.0, 50.0], [2.0, -100.0])
    torch.testing.assert_close(loaded(meta), enc(meta))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_pretrained_location_encoder(tmp_path / "nope.ckpt")
    torch.save({"w": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="no SIREN weights found"):
        load_pretrained_location_encoder(tmp_path / "other.pt")


def test_time_features_are_cyclic_and_clamped(tmp_path):
    enc = SHSirenEncoder(num_degrees=3, hidden=8, out_dim=4, dropout=0.0, time_years=(2002, 2012)).eval()
    meta = {"lat": torch.zeros(4), "lon": torch.zeros(4), "time": torch.tensor([2005.0, 2006.0, 2012.0, 2017.5])}
    feats = enc.time_features(meta)
    torch.testing.assert_close(feats[0, :2], feats[1, :2])  # same time of year
    torch.testing.assert_close(feats[:, 2], torch.tensor([-0.4, -0.2, 1.0, 1.0]))  # 2017 clamps to 2012
    torch.testing.assert_close(feats[3, :2], torch.tensor([0.0, -1.0]), atol=1e-6, rtol=0)  # mid-year
    assert enc(meta).shape == (4, 4)
    with pytest.raises(MetadataError, match=r"missing \['time'\]"):
        enc({"lat": torch.zeros(1), "lon": torch.zeros(1)})
    save_location_encoder(enc, tmp_path / "t.safetensors")
    torch.testing.assert_close(load_pretrained_location_encoder(tmp_path / "t.safetensors")(meta), enc(meta))
