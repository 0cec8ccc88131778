"""cxlbench: latency, bandwidth and placement-verified measurements on every memory kind."""
__version__ = "0.1.0"
