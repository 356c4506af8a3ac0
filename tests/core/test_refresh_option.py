"""``refresh_cache=False``: exact on unchanging master data, stale (by design) when it changes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
from reference import as_multiset, batch_join

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin


def _run(stream: pa.Table, master: pa.Table, refresh: bool) -> tuple[Counter[Any], float]:
    spec = JoinSpec("sk", "mk", ("attr",), chunk_bytes=16 * 400, refresh_cache=refresh)
    op = SemiStreamJoin(spec, ArrowMaster(master, 500), stream.schema, master.schema)
    out: Counter[Any] = Counter()
    for r in op.run(stream.to_batches(max_chunksize=1_000)):
        out += as_multiset(r.enriched)
    return out, float(op.totals()["cache_share"])


def test_without_refresh_the_join_is_exact_on_static_master_data() -> None:
    rng = np.random.default_rng(4)
    master = pa.table({"mk": rng.integers(0, 3_000, 3_000), "attr": rng.integers(0, 50, 3_000)})
    p = 1 / np.arange(1, 3_001)
    stream = pa.table({"sid": np.arange(40_000), "sk": rng.choice(3_000, 40_000, p=p / p.sum())})
    want = batch_join(stream, master, "sk", "mk", ["attr"])
    for refresh in (True, False):
        got, share = _run(stream, master, refresh)
        assert got == want
        assert share > 0.3  # the cache served most of it, so the option was exercised
