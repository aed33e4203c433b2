"""GMoE (Li et al., Sparse Mixture-of-Experts are Domain Generalizable Learners, ICLR 2023): Tables 1, 2, 3,
9, 10, 11 and 12, and the Theorem-1 synthetic experiment (App. B.2), as recipes.

Numbers are copied from the paper's text (`shared/papers/000_*.txt`), mean ± SE over 3 trials where it
prints one. The protocol (§5.1, App. D): DomainBed, 3 trials; GMoE and ViT initialised from DeiT-S/16
ImageNet-1k (App. C.2) and trained with the per-dataset learning rate and weight decay of Table 8, batch 32
per domain, 5K steps (DomainNet 15K in Tables 1, 2, 10, 11; 5K and 15K in Table 9). Rows the paper cites
from DomainBed or the algorithms' papers (ResNet-50) are run with DomainBed's protocol: 20 random hparams
draws x 3 trials, DomainNet 5K steps (15K for SWAD and MIRO, as their papers). The SWAD, MIRO and Fishr rows
cite those papers' own tables (`dgmoe.recipes.sources`), checked cell by cell; the other ResNet-50 rows are
entered as GMoE prints them.
"""
from __future__ import annotations

from dgmoe.data.catalogue import dataset_hparams
from dgmoe.experiments.config import SyntheticConfig
from dgmoe.recipes.base import Cell, Part, Recipe, Row, Weights, cells, columns
from dgmoe.recipes.sources import FISHR_R50, MIRO_R50, SWAD_R50

PAPER = "GMoE (Li et al., ICLR 2023)"
FIVE = ("PACS", "VLCS", "OfficeHome", "TerraIncognita", "DomainNet")
LARGE = ("SVIRO", "Camelyon17", "WILDSFMoW")
VIT, GMOE, R50, R101 = "vit_small_patch16_224", "gmoe_small_patch16_224", "resnet50", "resnet101"
DEIT_S = Weights("deit_small", "deit_small_patch16_224.safetensors",
                 "DeiT-S/16 ImageNet-1k (timm deit_small_patch16_224.fb_in1k); GMoE App. C.2, Table 4")
RESNET50 = Weights("resnet50", "resnet50.safetensors", "torchvision ResNet-50 ImageNet-1k (IMAGENET1K_V1), DomainBed's")
RESNET101 = Weights("resnet101", "resnet101.safetensors", "torchvision ResNet-101 ImageNet-1k (IMAGENET1K_V1)")
CITED = "DomainBed or the algorithm's paper (ResNet-50)"

#: GMoE Table 8: learning rate and weight decay per dataset ("to reproduce best performance of GMoE"), as
#: hparams overrides; the catalogue declares them (`DatasetHParams.gmoe_lr_wd`), for the ViT rows too
TABLE8 = {d: {"hparams": {"lr": lr, "weight_decay": wd}} for d in FIVE
          if (table8 := dataset_hparams(d).gmoe_lr_wd) is not None for lr, wd in [table8]}
STEPS_5K = {"DomainNet": {"steps": 5001}}  # DomainBed's 5K steps on DomainNet (the catalogue's default is 15K)


def _merge(*maps: dict) -> dict:
    out: dict = {}
    for m in maps:
        for dataset, settings in m.items():
            out[dataset] = {**out.get(dataset, {}), **settings}
    return out


def ours(name: str, datasets: tuple[str, ...], algorithms: tuple[str, ...] = ("ERM",),
         models: tuple[str, ...] = (VIT, GMOE), steps_5k: bool = False, pairs: bool = False) -> Part:
    """A part of the paper's own runs: DeiT-S initialisation, Table 8 hparams, 1 hparams setting x 3 trials."""
    per_dataset = _merge(TABLE8, STEPS_5K if steps_5k else {})
    return Part(name, datasets, algorithms, models, pretrained="deit_small",
                per_dataset={d: s for d, s in per_dataset.items() if d in datasets}, n_hparams=1, n_trials=3,
                single_test_envs=not pairs)


def resnet(name: str, datasets: tuple[str, ...], algorithms: tuple[str, ...], steps_5k: bool = True,
           pairs: bool = False) -> Part:
    """A part of the ResNet-50 rows: DomainBed's protocol (20 hparams draws x 3 trials)."""
    per_dataset = {d: s for d, s in STEPS_5K.items() if steps_5k and d in datasets}
    return Part(name, datasets, algorithms, (R50,), pretrained="resnet50", per_dataset=per_dataset,
                n_hparams=20, n_trials=3, single_test_envs=not pairs)


def r50(label: str, algorithm: str, text: str, datasets: tuple[str, ...] = FIVE, **kw) -> Row:
    return Row(label, algorithm, R50, cells(datasets, text, **kw), quoted=CITED)


TABLE1 = Recipe(
    "gmoe-table1", PAPER, "Table 1", "Overall out-of-domain accuracies, train-validation selection", "domainbed",
    rows=(
        Row("ERM (ResNet50)", "ERM", R50, cells(FIVE, "85.7±0.5 77.4±0.3 67.5±0.5 47.2±0.4 41.2±0.2")
            + cells(LARGE, "85.7±0.1 93.1±0.2 40.6±0.4"), quoted=CITED + " on the upper five datasets"),
        r50("IRM", "IRM", "83.5±0.8 78.5±0.5 64.3±2.2 47.6±0.8 33.9±2.8"),
        r50("DANN", "DANN", "84.6±1.1 78.7±0.3 68.6±0.4 46.4±0.8 41.8±0.2"),
        r50("CORAL", "CORAL", "86.0±0.2 77.7±0.5 68.6±0.4 46.4±0.8 41.8±0.2"),
        r50("MMD", "MMD", "85.0±0.2 76.7±0.9 67.7±0.1 42.2±1.4 39.4±0.8"),
        r50("FISH", "Fish", "85.5±0.3 77.8±0.3 68.6±0.4 45.1±1.3 42.7±0.2"),
        Row("SWAD", "SWAD", R50, cells(FIVE, "88.1±0.1 79.1±0.1 70.6±0.2 50.0±0.3 46.5±0.1"), quoted=SWAD_R50),
        Row("Fishr", "Fishr", R50, cells(FIVE, "85.5±0.2 77.8±0.2 68.6±0.2 47.4±1.6 41.7±0.0"), quoted=FISHR_R50),
        Row("MIRO", "MIRO", R50, cells(FIVE, "85.4±0.4 79.0±0.0 70.5±0.4 50.4±1.1 44.3±0.2"), quoted=MIRO_R50),
        Row("ERM (ViT-S/16)", "ERM", VIT, cells(FIVE, "86.2±0.1 79.7±0.0 72.2±0.4 42.0±0.8 47.3±0.2")
            + cells(LARGE, "89.6±0.0 91.1±0.1 44.8±0.2")),
        Row("GMoE-S/16", "ERM", GMOE, cells(FIVE, "88.1±0.1 80.2±0.2 74.2±0.4 48.5±0.4 48.7±0.2")
            + cells(LARGE, "90.3±0.1 93.7±0.2 46.6±0.4")),
    ),
    parts=(ours("vit-gmoe", FIVE + LARGE),
           resnet("resnet50", FIVE, ("ERM", "IRM", "DANN", "CORAL", "MMD", "Fish", "Fishr")),
           resnet("resnet50-15k", FIVE, ("SWAD", "MIRO"), steps_5k=False),
           resnet("resnet50-large", LARGE, ("ERM",))),
    weights=(DEIT_S, RESNET50),
    notes=("Lower part: SVIRO, Wilds-Camelyon (dgmoe's Camelyon17) and Wilds-FMOW (dgmoe's WILDSFMoW: DomainBed's "
           "regions as domains), one domain held out at a time, as DomainBed.",
           "The paper prints CORAL's OfficeHome, TerraInc and DomainNet cells equal to DANN's; entered as printed."))

TABLE2 = Recipe(
    "gmoe-table2", PAPER, "Table 2", "GMoE trained with DG algorithms (DomainNet, train-validation selection)",
    "domainbed",
    rows=(Row("GMoE", "ERM", GMOE, cells(("DomainNet",), "48.7")),
          Row("Fish", "Fish", R50, cells(("DomainNet",), "42.7"), quoted=CITED),
          Row("GMoE w/Fish", "Fish", GMOE, cells(("DomainNet",), "48.8")),
          Row("Swad", "SWAD", R50, cells(("DomainNet",), "46.5"), quoted=SWAD_R50),
          Row("GMoE w/Swad", "SWAD", GMOE, cells(("DomainNet",), "49.6"))),
    parts=(ours("gmoe", ("DomainNet",), ("ERM", "Fish", "SWAD"), (GMOE,)),
           resnet("resnet50", ("DomainNet",), ("Fish",)),
           resnet("resnet50-15k", ("DomainNet",), ("SWAD",), steps_5k=False)),
    weights=(DEIT_S, RESNET50))


def _lodo(text: str) -> tuple[Cell, ...]:
    """GMoE Table 9's two DomainNet columns: train-val, then lodo ("-" where the paper prints "—")."""
    tv, lodo = text.split()
    return cells(("DomainNet",), tv, selection="iid") + cells(("DomainNet",), lodo, selection="loo")


TABLE9 = Recipe(
    "gmoe-table9", PAPER, "Table 9", "DomainNet with 5K and 15K training steps, train-val and lodo selection",
    "domainbed",
    rows=(Row("ERM", "ERM", R50, _lodo("41.2±0.2 40.6±0.2"), quoted=CITED),
          Row("IRM", "IRM", R50, _lodo("33.9±2.8 33.5±3.0"), quoted=CITED),
          Row("DANN", "DANN", R50, _lodo("41.8±0.2 38.2±0.2"), quoted=CITED),
          Row("CORAL", "CORAL", R50, _lodo("41.8±0.2 41.1±0.1"), quoted=CITED),
          Row("MMD", "MMD", R50, _lodo("39.4±0.8 23.4±9.4"), quoted=CITED),
          Row("MLDG", "MLDG", R50, _lodo("41.2±0.1 41.0±0.2"), quoted=CITED),
          Row("Fish", "Fish", R50, _lodo("42.7±0.2 -"), quoted=CITED),
          Row("Fishr", "Fishr", R50, _lodo("41.7±0.2 -"), quoted=FISHR_R50),
          Row("ViT-S/16 (5K)", "ERM", VIT, _lodo("42.4±0.0 42.0±0.2"), part="vit-gmoe-5k"),
          Row("GMoE-S/16 (5K)", "ERM", GMOE, _lodo("44.6±0.3 44.7±0.2"), part="vit-gmoe-5k"),
          Row("Swad", "SWAD", R50, _lodo("46.5±0.1 -"), quoted=SWAD_R50),
          Row("MIRO", "MIRO", R50, _lodo("47.4±0.0 -"), quoted=MIRO_R50 + "; its DomainNet cell is 44.3 there, "
              "not this table's 47.4, whose source is not found"),
          Row("ViT-S/16 (15K)", "ERM", VIT, _lodo("47.1±0.3 46.1±0.4"), part="vit-gmoe-15k"),
          Row("GMoE-S/16 (15K)", "ERM", GMOE, _lodo("48.7±0.2 48.4±0.3"), part="vit-gmoe-15k")),
    parts=(resnet("resnet50-5k", ("DomainNet",), ("ERM", "IRM", "DANN", "CORAL", "MMD", "MLDG", "Fish", "Fishr"),
                  pairs=True),
           resnet("resnet50-15k", ("DomainNet",), ("SWAD", "MIRO"), steps_5k=False),
           ours("vit-gmoe-5k", ("DomainNet",), steps_5k=True, pairs=True),
           ours("vit-gmoe-15k", ("DomainNet",), pairs=True)),
    weights=(DEIT_S, RESNET50),
    notes=("The 5K rows use 5,001 steps, the 15K rows 15,001 (the catalogue's DomainNet default).",
           "Leave-one-domain-out needs the pair runs: those parts hold out every pair of domains too."))

TABLE10 = Recipe(
    "gmoe-table10", PAPER, "Table 10", "Overall out-of-domain accuracies, leave-one-domain-out selection",
    "domainbed", selection="loo",
    rows=(r50("ERM (ResNet50)", "ERM", "83.0±0.7 77.2±0.4 65.7±0.5 41.4±1.4 40.6±0.2"),
          r50("IRM", "IRM", "81.5±0.8 76.3±0.6 64.3±1.5 41.2±3.6 33.5±3.0"),
          r50("DANN", "DANN", "81.0±1.1 76.9±0.4 64.9±1.2 44.4±1.1 38.2±0.2"),
          r50("CORAL", "CORAL", "82.6±0.5 78.7±0.4 68.5±0.2 46.3±1.7 41.1±0.1"),
          r50("MMD", "MMD", "83.2±0.2 77.3±0.5 60.2±5.2 46.5±1.5 23.4±9.5"),
          r50("MLDG", "MLDG", "77.2±0.9 82.9±1.7 66.1±0.5 46.2±0.9 41.0±0.2"),
          Row("ViT-S/16", "ERM", VIT, cells(FIVE, "86.6±0.1 78.3±0.2 71.9±0.2 41.9±0.3 46.1±0.2")),
          Row("GMoE-S/16", "ERM", GMOE, cells(FIVE, "87.1±0.3 80.0±0.1 73.9±0.2 46.7±0.3 48.4±0.2"))),
    parts=(resnet("resnet50", FIVE, ("ERM", "IRM", "DANN", "CORAL", "MMD", "MLDG"), pairs=True),
           ours("vit-gmoe", FIVE, pairs=True)),
    weights=(DEIT_S, RESNET50),
    notes=("Every part holds out each domain and each pair of domains (one test, one validation domain).",))

TABLE11 = Recipe(
    "gmoe-table11", PAPER, "Table 11", "DG algorithms x backbones, train-validation selection", "domainbed",
    rows=(Row("Swad / ViT-S/16", "SWAD", VIT, cells(FIVE, "88.3 80.4 72.7 46.9 48.8")),
          Row("Swad / GMoE-S/16", "SWAD", GMOE, cells(FIVE, "88.6 80.8 74.5 49.1 49.6")),
          Row("Fish / ResNet50", "Fish", R50, cells(FIVE, "85.5 77.8 68.6 45.1 43.1"), quoted=CITED),
          Row("Fish / ViT-S/16", "Fish", VIT, cells(FIVE, "87.3 78.0 72.2 42.7 47.3")),
          Row("Fish / GMoE-S/16", "Fish", GMOE, cells(FIVE, "87.9 79.7 73.0 46.9 48.8")),
          Row("Fishr / ResNet50", "Fishr", R50, cells(FIVE, "85.5 77.8 68.6 47.4 41.7"), quoted=FISHR_R50),
          Row("Fishr / ViT-S/16", "Fishr", VIT, cells(FIVE, "85.6 79.1 71.8 44.1 47.6")),
          Row("Fishr / GMoE-S/16", "Fishr", GMOE, cells(FIVE, "88.3 78.8 72.7 45.6 48.3"))),
    parts=(resnet("resnet50", FIVE, ("Fish", "Fishr")), ours("vit-gmoe", FIVE, ("SWAD", "Fish", "Fishr"))),
    weights=(DEIT_S, RESNET50),
    notes=("The text of Table 11 has no SWAD / ResNet50 row; its Avg column (mean of the five) is not entered.",))

# GMoE Table 12 (App. D.5): trained on one DomainNet domain, accuracy on each domain's validation split (the
# training domain's is IID); catalogue domain names, columns Clipart Info Paint Quick Real Sketch
DOMAINNET = ("clipart", "infograph", "painting", "quickdraw", "real", "sketch")
SS_MODELS = (("ResNet50", R50), ("ResNet101", R101), ("ViT-S/16", VIT), ("GMoE-S/16", GMOE))
TABLE12_NUMBERS = {
    "clipart": ("68.5 12.3 25.8 9.5 39.6 37.1", "70.4 12.2 28.6 12.4 43.0 40.7", "74.7 16.2 35.3 12.7 50.9 40.4",
                "76.3 16.8 36.2 13.9 51.6 42.6"),
    "infograph": ("27.9 34.0 23.3 2.0 34.3 24.5", "29.2 35.6 24.0 3.1 34.1 24.6", "36.3 40.2 33.6 5.1 47.4 30.7",
                  "36.7 41.0 34.2 4.5 48.2 30.8"),
    "painting": ("37.1 12.9 62.7 2.2 49.3 33.3", "40.5 13.1 63.4 3.1 51.2 35.4", "42.7 15.9 69.0 5.0 56.4 37.0",
                 "43.5 16.1 69.3 5.3 56.4 38.0"),
    "quickdraw": ("17.3 1.1 2.8 62.4 7.3 9.2", "16.0 1.3 2.7 64.1 6.3 8.5", "22.1 2.0 6.3 66.2 11.8 11.8",
                  "22.8 2.0 6.4 66.8 12.2 12.9"),
    "real": ("39.5 13.0 40.0 4.4 73.6 30.5", "43.3 15.6 43.3 6.8 75.3 34.0", "46.9 18.0 46.0 5.0 79.5 33.4",
             "47.4 18.5 46.9 7.5 79.6 36.4"),
    "sketch": ("48.9 11.7 31.6 10.8 40.7 63.4", "48.4 11.8 31.9 11.3 38.1 64.3", "52.4 14.4 38.6 13.4 48.2 67.4",
               "52.9 14.1 36.6 13.7 49.0 68.4"),
}
#: GMoE Table 3's improvements over ResNet50 (%, relative; "OOD Imp." averages the five OOD domains)
TABLE3_IMPROVEMENTS = {"ResNet101": "1.1 12.4", "ViT-S/16": "10.0 38.6", "GMoE-S/16": "10.5 42.3"}


def _single_source_parts(sources: tuple[str, ...]) -> tuple[Part, ...]:
    """Trained on each of `sources` alone (every other DomainNet domain held out): 1 hparams setting x 3."""
    sets = tuple(tuple(i for i in range(len(DOMAINNET)) if DOMAINNET[i] != s) for s in sources)
    hp = {"DomainNet": TABLE8["DomainNet"]}
    return (Part("resnet50", ("DomainNet",), ("ERM",), (R50,), pretrained="resnet50", test_env_sets=sets),
            Part("resnet101", ("DomainNet",), ("ERM",), (R101,), pretrained="resnet101", test_env_sets=sets),
            Part("vit-gmoe", ("DomainNet",), ("ERM",), (VIT, GMOE), pretrained="deit_small", per_dataset=hp,
                 test_env_sets=sets))


def _single_source_rows(sources: tuple[str, ...], improvements: bool) -> tuple[Row, ...]:
    rows = []
    for k, (label, model) in enumerate(SS_MODELS):
        found = tuple(c for s in sources for c in columns("DomainNet", DOMAINNET, TABLE12_NUMBERS[s][k], source=s))
        if improvements and label in TABLE3_IMPROVEMENTS:
            found += columns("DomainNet", ("IID Imp.", "OOD Imp."), TABLE3_IMPROVEMENTS[label], source="painting")
        rows.append(Row(label, "ERM", model, found))
    return tuple(rows)


SS_NOTES = ("OOD accuracies are read on the other domains' validation (out) splits, as the caption says.",
            "The paper does not give the single-source hparams or steps: Table 8's DomainNet lr/wd for ViT and GMoE, "
            "dgmoe's defaults otherwise, DomainNet's 15K steps.")

TABLE3 = Recipe(
    "gmoe-table3", PAPER, "Table 3", "Single-source DG on DomainNet: trained on Paint", "single_source",
    selection="single-source", rows=_single_source_rows(("painting",), improvements=True),
    parts=_single_source_parts(("painting",)), weights=(DEIT_S, RESNET50, RESNET101), baseline="ResNet50",
    notes=SS_NOTES + ("Its MACs column is not entered; its accuracies are Table 12's Paint block.",))

TABLE12 = Recipe(
    "gmoe-table12", PAPER, "Table 12", "Single-source DG on DomainNet: each domain in turn", "single_source",
    selection="single-source", rows=_single_source_rows(DOMAINNET, improvements=False),
    parts=_single_source_parts(DOMAINNET), weights=(DEIT_S, RESNET50, RESNET101), notes=SS_NOTES)

#: App. B.2.1's three test sets: the training distribution, the pixel-level and the patch-level feature shifted
SYNTHETIC_CELLS = tuple(Cell("synthetic", split) for split in ("val", "test1", "test2"))

SYNTHETIC = Recipe(
    "gmoe-synthetic", PAPER, "App. B.2 (Fig. 4, 5)", "Theorem 1 on synthetic data: MLP vs FCN under feature shifts",
    "synthetic", selection=None,
    rows=(Row("MLP", "ERM", "mlp", SYNTHETIC_CELLS), Row("FCN", "ERM", "fcn", SYNTHETIC_CELLS)),
    synthetic=SyntheticConfig(),
    notes=("Fig. 4 is a plot: no number is in the text. The text says the MLP completely fails on test set 2 and "
           "the FCN on test set 1 (App. B.2.1).", "Runs in this process (`dgmoe synthetic`), not as a sweep; "
           "the noisy grid of Fig. 5 is written to synthetic.md too."))

RECIPES = (TABLE1, TABLE2, TABLE3, TABLE9, TABLE10, TABLE11, TABLE12, SYNTHETIC)
