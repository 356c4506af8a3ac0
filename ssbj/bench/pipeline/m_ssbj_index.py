"""``ssbj_index``: the ssbj job with ``join.hybrid: index`` (SSBJ's cache in front of batched key lookups, no scan)."""

from __future__ import annotations

from ssbj.bench.pipeline.m_ssbj import JobMethod

METHOD = JobMethod(
    "ssbj", "SSBJ, index mode (ssbj job, join.hybrid: index)", name="ssbj_index", join={"hybrid": "index"}
)
