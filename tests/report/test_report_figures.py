"""Figures explain themselves: domain names and test marks, titles, legends, colour bars, one colour per domain,
and any user-given text drawn literally (never as matplotlib maths)."""
import numpy as np
import pandas as pd
import pytest
import torch

from dgmoe.analysis import plots
from dgmoe.analysis.style import block_name, domain_colors, mpl_text, wrap

DOMAINS = ["art_painting", "cartoon", "photo", "sketch"]
ODD = "lr$\\frac$x"  # matplotlib would parse this as maths and fail at draw time


def _records(n_envs: int = 4) -> list[dict]:
    return [{"step": s, **{f"env{i}_{k}_acc": 0.1 * i + s / 1000 for i in range(n_envs) for k in ("in", "out")}}
            for s in (0, 100, 200, 300)]


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")) if t.get_text()]


def test_mpl_text_escapes_dollars_so_any_name_draws():
    assert mpl_text(ODD) == "lr\\$\\frac\\$x" and mpl_text("plain") == "plain"
    fig = plots.plot_accuracy_curves(_records(2), f"run {ODD}", [ODD, "b$c$"], [0])
    assert len(plots.png_bytes(fig)) > 1000  # unescaped, savefig raises a mathtext ValueError
    assert block_name("blocks.8.mlp") == "block 8 (blocks.8.mlp)" and block_name("head") == "head"
    assert max(len(line) for line in wrap("word " * 40, 60).splitlines()) <= 64


def test_accuracy_curves_name_domains_mark_the_test_domain_and_the_selected_step():
    fig = plots.plot_accuracy_curves(_records(), "ERM / vit / test photo", DOMAINS, [2], selected_step=200)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:4] == ["art_painting", "cartoon", "photo (test)", "sketch"]
    assert "selected step 200" in labels and "out split (validation)" in labels
    assert ax.get_title() == "ERM / vit / test photo" and ax.get_ylabel() == "accuracy (%)"
    colors = domain_colors(DOMAINS)
    photo = [line for line in ax.get_lines() if line.get_color() == colors["photo"] or
             tuple(line.get_color()) == colors["photo"]]
    assert len(photo) >= 2 and all(line.get_linewidth() > 2 for line in photo)  # test domain drawn thicker
    plots.png_bytes(fig)


def test_expert_usage_colours_by_domain_and_hatches_the_test_domain():
    usage = pd.DataFrame([{"layer": layer, "domain": d, "expert": e, "fraction": 0.25}
                          for layer in ("blocks.8.mlp", "blocks.10.mlp") for d in DOMAINS[1:] for e in range(4)])
    fig = plots.plot_expert_usage(usage, "usage: gmoe, step 300", DOMAINS, ["sketch"])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["cartoon", "photo", "sketch (test)"]
    assert [ax.get_title() for ax in fig.axes] == ["block 8 (blocks.8.mlp)", "block 10 (blocks.10.mlp)"]
    bars = {p.get_label(): p for p in fig.axes[0].containers}
    assert tuple(bars["photo"][0].get_facecolor()) == pytest.approx(domain_colors(DOMAINS)["photo"])
    assert bars["sketch (test)"][0].get_hatch() == "//" and bars["photo"][0].get_hatch() is None
    assert fig._suptitle.get_text() == "usage: gmoe, step 300"
    plots.png_bytes(fig)


def test_attention_maps_have_a_colour_bar_titles_and_maxima():
    images = torch.randint(0, 255, (2, 3, 28, 28), dtype=torch.uint8)
    maps = torch.rand(2, 3, 4, 4)
    fig = plots.plot_attention_maps(images, maps, ["photo (test) #0", "sketch #0"], title="CLS attention, block 11",
                                    title_colors=["red", "blue"])
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "CLS-to-patch attention / the map's max"]
    assert len(bars) == 1  # one colour bar reads every panel
    texts = _texts(fig)
    assert "CLS attention, block 11" in texts and "head 3" in texts and "photo (test) #0" in texts
    assert f"max {maps[1, 2].max():.3f}" in texts
    plots.png_bytes(fig)


@pytest.mark.parametrize("mode", ["numbers", "colors"])
def test_routing_maps_say_what_the_marks_mean(mode):
    images = [torch.zeros(3, 28, 28, dtype=torch.uint8)] * 2
    maps = [torch.tensor(np.arange(16).reshape(4, 4) % 3)] * 2
    fig = plots.plot_routing_maps(images, maps, 3, [f"{ODD} #0", "b #0"], mode=mode,
                                  title="Top-1 expert per patch, block 8: gmoe, step 3")
    texts = _texts(fig)
    assert "Top-1 expert per patch, block 8: gmoe, step 3" in texts
    if mode == "colors":
        assert [t.get_text() for t in fig.legends[0].get_texts()] == ["expert 0", "expert 1", "expert 2"]
    else:
        assert "number in a patch = its top-1 expert (0-2)" in texts
    plots.png_bytes(fig)


def test_domain_colours_follow_the_dataset_order():
    assert domain_colors(DOMAINS)["photo"] == domain_colors(["art_painting", "cartoon", "photo"])["photo"]
    assert len(set(domain_colors([f"d{i}" for i in range(12)]).values())) == 12  # tab20 beyond 10 domains
