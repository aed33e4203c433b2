"""The sparse mixture-of-experts family: one config (`MoEConfig`: token or image routing, optional shared
expert), routers, dispatch, experts, losses, the layer (`MoEMlp`), its routing record and its auxiliary
losses (`aux_losses`, added by algorithms through `weighted_aux_loss`)."""
from dgmoe.moe.auxiliary import AUX_LOSS_WEIGHTS, aux_losses, clear_aux, sparse_layers, weighted_aux_loss
from dgmoe.moe.config import MoEConfig
from dgmoe.moe.layer import MoEMlp, no_aux_record, routing_context
from dgmoe.moe.record import record_routing

__all__ = ["AUX_LOSS_WEIGHTS", "MoEConfig", "MoEMlp", "aux_losses", "clear_aux", "no_aux_record", "record_routing",
           "routing_context", "sparse_layers", "weighted_aux_loss"]
