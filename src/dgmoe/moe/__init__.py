"""The sparse mixture-of-experts family: one config (`MoEConfig`: token or image routing, optional shared
expert), the gate (`Gate`, on a router, deciding a `Routing`), the dispatch and its one chooser, experts,
losses, the layer (`MoEMlp`) composing them, its routing modes (`routing_mode`), its routing record and its
auxiliary losses (`aux_losses`, added by algorithms through `weighted_aux_loss`)."""
from dgmoe.moe.auxiliary import AUX_LOSS_WEIGHTS, aux_losses, clear_aux, sparse_layers, weighted_aux_loss
from dgmoe.moe.config import MoEConfig
from dgmoe.moe.gate import Gate, Routing, routing_context
from dgmoe.moe.layer import MoEMlp, no_aux_record, routing_mode
from dgmoe.moe.record import record_routing

__all__ = ["AUX_LOSS_WEIGHTS", "Gate", "MoEConfig", "MoEMlp", "Routing", "aux_losses", "clear_aux", "no_aux_record",
           "record_routing", "routing_context", "routing_mode", "sparse_layers", "weighted_aux_loss"]
