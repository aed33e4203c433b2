"""Sparse mixture-of-experts building blocks: routers, dispatch, experts, losses and the MoE layer."""
from dgmoe.moe.aux import clear_moe_aux, moe_aux_loss
from dgmoe.moe.config import MoEConfig
from dgmoe.moe.layer import MoEMlp
from dgmoe.moe.record import record_routing

__all__ = ["MoEConfig", "MoEMlp", "clear_moe_aux", "moe_aux_loss", "record_routing"]
