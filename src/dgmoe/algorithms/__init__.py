"""DG algorithms; one small module per method, each registering itself by class name."""
# explicit imports make registration visible
from dgmoe.algorithms import (  # noqa: F401
    adrmx,
    andmask,  # ANDMask and SANDMask
    arm,
    cad,  # CAD and CondCAD
    causirl,  # CausIRL_CORAL and CausIRL_MMD
    clipood,  # CLIPood (needs --head zeroshot)
    coral,
    d3g,  # geographic baseline: domain-relation heads
    d3g_wrap,  # D3G with a WRAP location encoder
    dann,  # DANN and CDANN
    eqrm,
    erm,
    erm_plus_plus,  # ERMPlusPlus
    fish,
    fishr,
    flyp,  # FLYP (needs --head zeroshot)
    group_dro,
    ib,  # IB_ERM and IB_IRM
    iga,
    irm,
    lp_ft,  # LPFT
    miro,
    mixup,
    mldg,
    mmd,
    moge,  # MoGE's eq. 4 losses
    mtl,
    rdm,
    rsc,
    sagnet,
    sd,
    selfreg,
    sma,  # SMA; EnsembleOfAverages combines SMA runs
    swad,
    transfer,
    trm,
    urm,
    vrex,
)
from dgmoe.algorithms.registry import ALGORITHMS, get_algorithm, list_algorithms, register_algorithm

__all__ = ["ALGORITHMS", "get_algorithm", "list_algorithms", "register_algorithm"]
