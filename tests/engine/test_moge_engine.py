"""MoGE through the training engine on GeoMNIST (tiny), then the routing analysis of the finished run."""
from __future__ import annotations

import json


def test_moge_trains_on_geomnist_and_is_analysed(tmp_path):
    import dgmoe.algorithms.moge  # noqa: F401
    import dgmoe.data.geo.geomnist  # noqa: F401
    import dgmoe.models.moge  # noqa: F401
    from dgmoe.analysis.geo import analyze_run
    from dgmoe.data.geo.geomnist import geo_domains
    from dgmoe.engine.config import RunConfig
    from dgmoe.engine.trainer import train
    from dgmoe.experiments.geo import summarize_run

    _, test_envs = geo_domains()
    cfg = RunConfig.from_flat(dataset="GeoMNIST", test_envs=tuple(test_envs), model="moge_tiny_patch16_224",
                              algorithm="MoGE", output_dir=str(tmp_path / "run"), steps=3, checkpoint_freq=2,
                              n_per_domain=20, patch_size=7,
                              hparams={"lr": 1e-3, "batch_size": 8, "drop_path_rate": 0.0},
                              model_kwargs={"embed_dim": 32, "depth": 4, "num_heads": 2}, num_threads=1,
                              progress="none")
    result = train(cfg)
    assert [r["step"] for r in result.records] == [0, 2]
    record = result.records[-1]
    assert {"loss_cka", "loss_supcon", "loss_aux", "gamma"} <= set(record)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["model_build"]["name"] == "moge_tiny_patch16_224"
    summary = summarize_run(tmp_path / "run", ("CentralAmerica",))
    assert 0.0 <= summary["worst_region_acc"] <= summary["overall_acc"] <= 1.0
    paths = analyze_run(tmp_path / "run", tmp_path / "figs", envs=[0, 1])
    assert all(p.stat().st_size > 1000 for p in paths.values())
