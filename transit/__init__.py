"""TRANSIT: transparent scale-in for multi-node LLM training."""

__version__ = "0.1.0"
