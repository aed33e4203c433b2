"""The hyperparameter facts of the catalogue's datasets (`DatasetSpec.hparams`): DomainBed's per-dataset
entries of `hparams_registry.py` (SMALL_IMAGES; DomainNet's smaller batch-size draw; RDM's entries), GMoE's
Table 8 learning rate and weight decay of sparse backbones (CUB-DG from the official registry) and MIRO's
official lambda (Cha et al., ECCV 2022). Each dataset's entry is declared beside it in the catalogue from
these parts; `dgmoe.engine.hparams` and the algorithms read them, never a dataset's name."""
from __future__ import annotations

from dgmoe.hparams import SMALL_IMAGES, DatasetHParams, HParam, as_int, choice, fixed, positive, uniform

#: DomainBed's RDM entries: the batch size of the large datasets (DomainNet, TerraIncognita), its lambda on
#: DomainNet, PACS and TerraIncognita, its anneal on DomainNet, no variance term on TerraIncognita,
#: OfficeHome and DomainNet.
RDM_LARGE_BATCH = {"batch_size": HParam(40, as_int(uniform(30, 60)), positive)}
RDM_NO_VARIANCE = {"variance_weight": HParam(0.0, fixed(0.0))}
RDM_LAMBDA_5 = {"rdm_lambda": HParam(5.0, uniform(1.0, 10.0))}
RDM_DOMAINNET = {"rdm_lambda": HParam(0.5, uniform(0.1, 1.0)),
                 "rdm_penalty_anneal_iters": HParam(2400, as_int(uniform(1500, 3000)))}
#: MIRO's official lambda for PACS and VLCS (0.1 elsewhere, the algorithm's own default).
MIRO_SMALL_LAMBDA = {"ld": HParam(0.01, choice([0.001, 0.01, 0.1, 1.0]))}

PACS = DatasetHParams(gmoe_lr_wd=(3e-5, 0.0), algorithms={"RDM": RDM_LAMBDA_5, "MIRO": MIRO_SMALL_LAMBDA})
VLCS = DatasetHParams(gmoe_lr_wd=(3e-5, 1e-6), algorithms={"MIRO": MIRO_SMALL_LAMBDA})
OFFICE_HOME = DatasetHParams(gmoe_lr_wd=(1e-5, 1e-6), algorithms={"RDM": RDM_NO_VARIANCE})
TERRA_INCOGNITA = DatasetHParams(gmoe_lr_wd=(5e-5, 1e-4),
                                 algorithms={"RDM": {**RDM_LARGE_BATCH, **RDM_LAMBDA_5, **RDM_NO_VARIANCE}})
DOMAIN_NET = DatasetHParams(gmoe_lr_wd=(5e-5, 0.0), batch_size_log2_max=5.0,
                            algorithms={"RDM": {**RDM_LARGE_BATCH, **RDM_DOMAINNET, **RDM_NO_VARIANCE}})
CUB_DG = DatasetHParams(gmoe_lr_wd=(5e-5, 0.0))

__all__ = ["CUB_DG", "DOMAIN_NET", "OFFICE_HOME", "PACS", "SMALL_IMAGES", "TERRA_INCOGNITA", "VLCS"]
