"""Ssbj: semi-stream enrichment with SSBJ and MESHJOIN."""

__version__ = "0.1.0"
