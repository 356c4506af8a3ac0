"""``meshjoin``: the ssbj job with ``join.algorithm: meshjoin`` (no cache), same budget and sink."""

from __future__ import annotations

from ssbj.bench.pipeline.m_ssbj import JobMethod

METHOD = JobMethod("meshjoin", "MESHJOIN (ssbj job)")
