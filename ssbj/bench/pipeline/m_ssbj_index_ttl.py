"""``ssbj_index_ttl``: index mode with an R-cycle as long as the lookup join's TTL (freshness on a par).

Index mode's default R-cycle (twice the waiting tuples the budget holds) bounds staleness
far tighter than ``lookup_lru_in``'s TTL (``Scale.ttl_s``, 60 s): at R = 20M it stopped
stale rows after 521k tuples where the lookup went on for 2.0M. This variant sets
``join.index_cycle_tuples`` to the TTL times :data:`TTL_RATE`, the lookup's rate at that
scale (36.9k and 36.0k tuples/s at 1% and 5% of R, bench/pipeline/issue11-item5-case-a-index),
so both bound staleness alike. The operator counts its R-cycle in tuples, not seconds (no clock:
exact restore), hence the rate.
"""

from __future__ import annotations

from ssbj.bench.pipeline.harness import Harness
from ssbj.bench.pipeline.m_ssbj import JobMethod
from ssbj.bench.pipeline.spec import Json

TTL_RATE = 36_000  # tuples/s: the lookup join's measured rate at R = 20M


def _join(h: Harness) -> Json:
    return {"hybrid": "index", "index_cycle_tuples": max(1, int(h.scale.ttl_s * TTL_RATE))}


METHOD = JobMethod("ssbj", "SSBJ, index mode, R-cycle = the lookup's TTL in tuples", name="ssbj_index_ttl", join=_join)
