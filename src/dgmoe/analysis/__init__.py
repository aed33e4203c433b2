"""Seeing inside the experts (GMoE §5.4, App. B.2, App. E; SF-MoE Figs. 3, 5).

- `routing`: top-1 expert of every patch per MoE layer, expert usage per domain.
- `patches`: part -> nearest-patch matching, part x expert histograms, attribute x expert matrices.
- `attention`: per-head CLS attention maps of a block and the head-redundancy score.
- `synthetic`: the Theorem-1 experiment of App. B.2 (MLP vs FCN under pixel/patch feature shifts).
- `pipeline`: from a run folder to the PNG/Markdown files that `dgmoe report` embeds.
"""
