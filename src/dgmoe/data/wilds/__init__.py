"""The WILDS datasets (Koh et al., ICML 2021) in the catalogue, read from the official WILDS v1.x file layouts
under `--data-dir` (nothing is downloaded; the `wilds` package is not needed).

How each maps onto dgmoe's domains ("environments": one training minibatch per training domain and step,
every domain evaluated at every checkpoint), and why:

- **FMoW** (`fmow_v1.1/`; MoGE Table 1a: "62 classes, 5 regions as domains", WILDS' official splits).
  Domains 0-4 `train/Asia`, `train/Europe`, `train/Africa`, `train/Americas`, `train/Oceania`: WILDS'
  `train` split cut by region, so DG algorithms see the regions as their domains (MoGE's GroupDRO, Fish,
  VREx, ... baselines use the region labels) and every algorithm draws region-balanced batches; the 42
  `train` images from no named region ('Other') are in no training domain. Domains 5-8 `id_val`,
  `id_test`, `val` (OOD, 2013-15), `test` (OOD, 2016-17) are evaluation splits, always held out
  (`--test-envs 5 --test-envs 6 --test-envs 7 --test-envs 8`, `dgmoe train`'s default for FMoW, FMoW-LAO and
  iWildCam being their evaluation splits). Groups: regions, 'Other' never the worst
  (WILDS' `acc_worst_region`);
  selection: worst-region accuracy on `val` (WILDS' official model selection; MoGE).
- **FMoW-LAO** (dgmoe's leave-Asia-out split; MoGE Table 1b, whose own split is not public). The FMoW
  layout without Asia in training: domains 0-3 `train/<region>` of the four other regions; 4-7 `id_val`,
  `id_test` (non-Asian images only), `val_asia`, `test_asia` (the Asian images of the OOD val and test
  splits), held out (`--test-envs 4 5 6 7`). Selection on `val_asia`; Table 1b's number is `test_asia`'s
  accuracy. MoGE's gate-only tuning on 150 Asian samples is not part of it.
- **WILDSFMoW** (DomainBed's `WILDSFMoW`; GMoE Table 1 "Wilds-FMOW"). Domains = the six regions
  `Asia` ... `Other`, each holding all its FMoW images (every split and year), left out one at a time with
  DomainBed's selection methods; no group metrics.
- **iWildCam** (`iwildcam_v2.0/`; MoGE Table 1c, macro-F1). Domains `train`, `id_val`, `id_test`, `val`
  (OOD cameras), `test` (OOD cameras), the last four held out (`--test-envs 1 2 3 4`). One training domain:
  WILDS trains its group algorithms with the 243 training cameras as groups, which would be 243
  minibatches per step here, so only algorithms that train on one domain (ERM, MoGE, ...) run on it.
  Groups: camera locations (`location_id`); macro-F1 recorded; selection: worst-location accuracy on `val`.
- **Camelyon17** (`camelyon17_v1.0/`; DomainBed's `WILDSCamelyon`, GMoE Table 1 "Wilds-Camelyon").
  Domains `hospital_0` ... `hospital_4`, each holding all its patches. GMoE's protocol is DomainBed's:
  one hospital held out per run, `iid` selection. WILDS' official protocol is `--test-envs 1 2`: train on
  hospitals 0, 3, 4, select on hospital 1 (OOD val), report hospital 2 (OOD test). Groups: slides
  (WILDS' `acc_wg`); selection: worst-slide accuracy on `hospital_1`.

For every held-out domain the records carry WILDS' metrics over the whole split (its in and out parts):
`env{i}_acc_avg`, `env{i}_acc_worst_group`, `env{i}_f1_macro` (iWildCam), and per named group
`env{i}_acc_<field>:<name>` / `env{i}_count_<field>:<name>` (FMoW regions); `wilds_val_env` names the
validation domain's index when the run holds it out (`dgmoe.metrics.GroupEvaluation`,
`dgmoe.selection.WorstGroupSelection`). The engine's in/out split still holds out `--holdout-fraction`
(20%) of every training domain, as in DomainBed, so training uses 80% of WILDS' train split. Images are
decoded per item (the datasets are 10-50 GB); DomainBed's augmentation applies (WILDS trains FMoW and
Camelyon17 without augmentation: pass `--hparams '{"data_augmentation": false}'`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from dgmoe.data.catalogue import DatasetSpec, register_dataset
from dgmoe.data.wilds import camelyon, fmow, iwildcam
from dgmoe.data.wilds.files import image_domains, wilds_root
from dgmoe.hparams import DatasetHParams
from dgmoe.metrics import GroupEvaluation

#: FMoW trains on time splits; its regions are metadata (D3G's default heads, `DatasetHParams.region_field`)
FMOW_REGION_HEADS = DatasetHParams(region_field="region", regions=len(fmow.FMOW_REGIONS))

#: steps between evaluations of the WILDS datasets: each evaluation reads every held-out split whole
#: (FMoW about 65,000 images, Camelyon17 up to 455,954), so dgmoe evaluates less often than DomainBed (100)
WILDS_CHECKPOINT_FREQ = 500
REFERENCE = "Koh et al., WILDS, ICML 2021"


def _files(dir_name: str, marker: str, name: str) -> Callable[..., Path]:
    """The catalogue's `data_check`: the metadata table `wilds_root` looks for is there; returns its root."""
    return lambda data_dir: wilds_root(data_dir, dir_name, marker, name)


_fmow_files = _files(fmow.FMOW_DIR, "rgb_metadata.csv", "FMoW")
_iwildcam_files = _files(iwildcam.IWILDCAM_DIR, "metadata.csv", "iWildCam")
_camelyon_files = _files(camelyon.CAMELYON_DIR, "metadata.csv", "Camelyon17")


def _fmow_builder(layout: str) -> Callable:
    def build(data_dir, img_size, n_per_domain=None, seed=0):
        root = _fmow_files(data_dir)
        df = fmow.read_fmow(root)
        envs = image_domains("FMoW", df, fmow.fmow_parts(df, layout), fmow.image_paths(root), fmow.META, img_size,
                             n_per_domain, seed)
        return envs, fmow.FMOW_CATEGORIES, f"FMoW-WILDS at {root} ({layout} layout, images decoded per item)"
    return build


def _iwildcam_builder(data_dir, img_size, n_per_domain=None, seed=0):
    root = _iwildcam_files(data_dir)
    df = iwildcam.read_iwildcam(root)
    envs = image_domains("iWildCam", df, iwildcam.iwildcam_parts(df), iwildcam.image_paths(root), iwildcam.META,
                         img_size, n_per_domain, seed)
    return envs, iwildcam.iwildcam_classes(root), f"iWildCam2020-WILDS at {root} (images decoded per item)"


def _camelyon_builder(data_dir, img_size, n_per_domain=None, seed=0):
    root = _camelyon_files(data_dir)
    df = camelyon.read_camelyon(root)
    envs = image_domains("Camelyon17", df, camelyon.camelyon_parts(df), camelyon.image_paths(root), camelyon.META,
                         img_size, n_per_domain, seed)
    return envs, camelyon.CAMELYON_CLASSES, f"Camelyon17-WILDS at {root} (patches decoded per item)"


def _fmow_evaluation(val_domain: str, wilds_name: str | None) -> GroupEvaluation:
    return GroupEvaluation("region", fmow.FMOW_REGIONS, exclude_substring=fmow.OTHER, val_domain=val_domain,
                           wilds_name=wilds_name, wilds_eval_splits=_eval_domains("official") if wilds_name else ())


def _eval_domains(layout: str) -> tuple[str, ...]:
    return tuple(d for d in fmow.FMOW_LAYOUTS[layout] if not d.startswith("train/"))


for _spec in (
    DatasetSpec("FMoW", "wilds", fmow.FMOW_LAYOUTS["official"], len(fmow.FMOW_CATEGORIES), fmow.FMOW_DIR,
                checkpoint_freq=WILDS_CHECKPOINT_FREQ, builder=_fmow_builder("official"),
                evaluation=_fmow_evaluation("val", "fmow"), eval_domains=_eval_domains("official"),
                reference=f"Christie et al., CVPR 2018; {REFERENCE}; MoGE Table 1a",
                data_check=_fmow_files, hparams=FMOW_REGION_HEADS, class_names=fmow.FMOW_CATEGORIES),
    DatasetSpec("FMoW-LAO", "wilds", fmow.FMOW_LAYOUTS["leave_asia_out"], len(fmow.FMOW_CATEGORIES), fmow.FMOW_DIR,
                checkpoint_freq=WILDS_CHECKPOINT_FREQ, builder=_fmow_builder("leave_asia_out"),
                evaluation=_fmow_evaluation("val_asia", None), eval_domains=_eval_domains("leave_asia_out"),
                reference="dgmoe's FMoW leave-Asia-out split (MoGE Table 1b), dgmoe.data.wilds",
                data_check=_fmow_files, hparams=FMOW_REGION_HEADS, class_names=fmow.FMOW_CATEGORIES),
    DatasetSpec("WILDSFMoW", "wilds", fmow.FMOW_LAYOUTS["regions"], len(fmow.FMOW_CATEGORIES), fmow.FMOW_DIR,
                checkpoint_freq=WILDS_CHECKPOINT_FREQ, builder=_fmow_builder("regions"),
                reference=f"DomainBed's WILDSFMoW, regions as domains; {REFERENCE}; GMoE Table 1",
                data_check=_fmow_files, class_names=fmow.FMOW_CATEGORIES),
    DatasetSpec("iWildCam", "wilds", iwildcam.IWILDCAM_DOMAINS, iwildcam.IWILDCAM_NUM_CLASSES, iwildcam.IWILDCAM_DIR,
                checkpoint_freq=WILDS_CHECKPOINT_FREQ, native_size=448, builder=_iwildcam_builder,
                evaluation=GroupEvaluation("location_id", f1_macro=True, val_domain="val", wilds_name="iwildcam",
                                           wilds_eval_splits=iwildcam.IWILDCAM_DOMAINS[1:]),
                eval_domains=iwildcam.IWILDCAM_DOMAINS[1:],
                reference=f"Beery et al., 2021; {REFERENCE}; MoGE Table 1c",
                data_check=_iwildcam_files),
    DatasetSpec("Camelyon17", "wilds", camelyon.CAMELYON_DOMAINS, len(camelyon.CAMELYON_CLASSES),
                camelyon.CAMELYON_DIR, checkpoint_freq=WILDS_CHECKPOINT_FREQ, builder=_camelyon_builder,
                evaluation=GroupEvaluation("slide", val_domain=camelyon.CAMELYON_DOMAINS[camelyon.VAL_HOSPITAL],
                                           trial_seeds=10, wilds_name="camelyon17",
                                           wilds_splits=((camelyon.CAMELYON_DOMAINS[camelyon.VAL_HOSPITAL], "val"),
                                                         (camelyon.CAMELYON_DOMAINS[camelyon.TEST_HOSPITAL], "test")),
                                           wilds_eval_splits=("id_val", "test", "val")),
                reference=f"Bandi et al., IEEE TMI 2018; {REFERENCE}; DomainBed's WILDSCamelyon; GMoE Table 1",
                data_check=_camelyon_files, class_names=camelyon.CAMELYON_CLASSES),
):
    register_dataset(_spec)

__all__ = ["WILDS_CHECKPOINT_FREQ", "camelyon", "fmow", "iwildcam"]
