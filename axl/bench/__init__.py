"""Daemon benchmarks: real nodes on loopback, measured against baselines.

Throughput in bytes per second depends on the machine, so every figure is
printed next to a ratio to something measured in the same run on the same
machine (a raw TLS stream, a no-op HTTP handler, the one-hop figure), which
is what makes runs on different machines comparable. `python -m axl.bench`.
"""
