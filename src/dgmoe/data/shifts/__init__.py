"""Distribution-shift suites declared in the catalogue: ImageNet with its shifts V2, R, Sketch, A and ObjectNet
evaluated from one run (`imagenet`), and DomainBed-OOP's out-of-pretraining marks on DomainBed's five datasets
(`oop`). The shift table and effective robustness are `dgmoe.report.shifts`."""
from __future__ import annotations

from dgmoe.data.catalogue import DatasetSpec, register_dataset
from dgmoe.data.shifts import imagenet, oop, stand_in
from dgmoe.metrics import ShiftSuite

#: the schedule is dgmoe's default, not a paper's (the papers fine-tune for epochs of ImageNet: pass --steps);
#: every evaluation reads the six held-out sets whole (over 160,000 images), hence a checkpoint every 1,000 steps
IMAGENET_SHIFTS = register_dataset(DatasetSpec(
    "ImageNetShifts", "files", tuple(s.domain for s in imagenet.IMAGENET_SHIFTS), len(imagenet.class_facts()["wnids"]),
    None, n_steps=10001, checkpoint_freq=1000, builder=imagenet.builder(imagenet.IMAGENET_SHIFTS, "ImageNetShifts"),
    eval_domains=tuple(s.domain for s in imagenet.IMAGENET_SHIFTS[1:]), class_maps=imagenet.class_maps(),
    shifts=ShiftSuite(imagenet.ID_DOMAIN, imagenet.SHIFT_DOMAINS), class_names=tuple(imagenet.class_facts()["names"]),
    reference="Deng et al., CVPR 2009, and its shifts (Taori et al., NeurIPS 2020; WiSE-FT Table 1)",
    layout=", ".join(f"{s.folder}/ ({s.domain})" for s in imagenet.IMAGENET_SHIFTS)))

#: dataset -> what writes its stand-in folders under a root (the recipes' smoke scale, `dgmoe.recipes.plan`)
STAND_INS = {"ImageNetShifts": stand_in.write_imagenet_shifts}

__all__ = ["IMAGENET_SHIFTS", "STAND_INS", "imagenet", "oop", "stand_in"]
