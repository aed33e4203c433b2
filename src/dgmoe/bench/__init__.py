"""Cost benchmarks: the MoE layer against its compute limit, and whole models against each other.

Every figure is a ratio measured in one run, with the candidates interleaved round by round and the
median taken, because this kind of machine drifts by tens of percent over minutes.
"""
