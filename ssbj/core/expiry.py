"""Expiry (Algorithm 1, lines 39-41): the oldest chunk leaves H_S and Q after one R-cycle.

A tuple that leaves unmatched has met every partition of R: its value has no master
rows, and may become an empty cache entry (:func:`ssbj.core.switching.cache_empties`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ssbj.core.hs import hs_expire
from ssbj.core.switching import cache_empties

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin


def expire(op: SemiStreamJoin, p: int, unmatched: list[pa.Table]) -> None:
    """DELETE the oldest chunk from Q and H_S once it has met every partition of R."""
    hs = op.hs
    while len(hs.queue) and hs.queue.oldest()[2] == (p + 1) % op._k:
        base, n, _, nbytes = hs.queue.pop()
        um, live, empties, gone = hs_expire(
            hs.hix,
            hs.ring_key,
            hs.link,
            hs.cap,
            hs.hi,
            hs.lo,
            base + n,
            op._use_cache,
            op.empty_cost(),
            op.tuple_cost(),
            op.spec.switch_factor,
            op.stats.table.keys,
            op.stats.table.used,
            op.stats.table.payload,
        )
        live = int(live)
        hs.live -= live
        hs.row_bytes -= nbytes
        op._c.served_disk += live
        op._c.matched += live - len(um)
        if len(um):
            op._c.bump("hs_unmatched", len(um))
        hs.values -= int(gone)
        if len(empties):  # before the chunk is dropped: one gather for its unmatched rows and theirs
            more = cache_empties(op, np.unique(empties), lo=base + n)
            if len(more):
                um = np.concatenate((um, more))
        if len(um):
            unmatched.append(hs.take(um))
        hs.rows.drop_before(base + n)
