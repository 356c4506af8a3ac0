"""Cached rows are refreshed by the disk-phase scan: none is older than one R-cycle."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from range_master import RangeMaster
from reference import as_multiset, batch_join

from ssbj.core import JoinSpec, SemiStreamJoin
from ssbj.core import budget as B
from ssbj.core.checkpoint import DirectoryStore


def _stream(rng: random.Random, first_id: int, n: int) -> pa.Table:
    keys: list[int | None] = []
    for _ in range(n):
        r = rng.random()
        keys.append(0 if r < 0.4 else 99 if r < 0.6 else None if r < 0.62 else rng.randrange(20))
    return pa.table({"id": pa.array(range(first_id, first_id + n), pa.int64()), "k": pa.array(keys, pa.int64())})


@pytest.mark.parametrize("split_calls", [False, True])
@pytest.mark.parametrize("resident", [False, True])
@pytest.mark.parametrize("r_filter", ["off", "always"])
@pytest.mark.parametrize("checkpoint_each_step", [False, True])
def test_updates_inserts_and_deletes_reach_cached_values_within_one_r_cycle(
    tmp_path: Any, checkpoint_each_step: bool, r_filter: str, resident: bool, split_calls: bool, monkeypatch: Any
) -> None:
    """With the R-filter too: value 99 has no rows (outside the bitmap's range) until one is inserted.

    ``resident``: partitions probed in one pass over the master's own buffers; a read that
    brings the very buffers of the last read skips the refresh (ssbj.core.resident), one
    with new buffers (the change) refreshes. ``split_calls``: the disk phase's kernel in
    calls of 2 pairs (ssbj.core.diskprobe), so a piece's refresh rows come from several calls.
    """
    if split_calls:
        monkeypatch.setattr(B, "probe_call_pairs", lambda op: 2)
    rng = random.Random(7)
    rows = {pk: (pk % 20, f"v0-{pk}") for pk in range(200)}
    master = RangeMaster(rows, b=20, k=10, resident=resident)
    spec = JoinSpec(
        stream_key="k",
        master_key="key",
        master_columns=("pk", "v"),
        chunk_bytes=2_000,
        r_filter=r_filter,  # type: ignore[arg-type]
        disk_chunk_rows=8 if resident else None,
    )
    schema = _stream(rng, 0, 1).schema
    mschema = master.table().schema
    op = SemiStreamJoin(spec, master, schema, mschema)
    store = DirectoryStore(tmp_path)
    next_id = 0
    outputs: list[tuple[int, pa.Table]] = []  # (step, enriched)
    pushed_at: dict[int, int] = {}
    batches: list[pa.Table] = []
    changed_at: int | None = None
    k = master.num_partitions()
    for step in range(12 * k):
        batch = _stream(rng, next_id, 60)
        batches.append(batch)
        for i in range(next_id, next_id + 60):
            pushed_at[i] = step
        next_id += 60
        op.push(batch)
        res = op.step()
        outputs.append((step, res.enriched))
        if checkpoint_each_step:
            op.checkpoint(store, step)
            op = SemiStreamJoin.restore(store, spec, master, schema, mschema)
        known_empty = 99 in op.cached_values() or op.rfilter.answering(op.r_cycle) is not None
        if changed_at is None and 0 in op.cached_values() and known_empty:
            # update every row, delete one row of cached value 0, insert one for the empty entry 99
            for pk, (key, _) in list(master.rows.items()):
                master.rows[pk] = (key, f"v1-{pk}")
            del master.rows[20]
            master.rows[205] = (99, "v1-205")
            changed_at = step + 1
    assert changed_at is not None, "values 0 and 99 never reached the cache"
    assert op.totals()["cache_share"] > 0.3
    skipped = op._c.extra.get("refresh_skipped_unchanged", 0)
    assert (skipped > 0) == (resident and not checkpoint_each_step)  # (a restored operator refreshes its first reads)
    if r_filter == "always":
        assert op.totals()["unmatched_source_rows"] > 0
        assert op._c.extra.get("filter_answered", 0) > 0
    # every tuple that arrived one R-cycle (k steps) after the change sees only the new R
    late_out = Counter[tuple[Any, ...]]()
    late_ids = {i for i, s in pushed_at.items() if s >= changed_at + k}
    for _, out in outputs:
        for row, cnt in as_multiset(out).items():
            if row[0] in late_ids:
                late_out[row] += cnt
    for tail in op.drain():
        for row, cnt in as_multiset(tail.enriched).items():
            if row[0] in late_ids:
                late_out[row] += cnt
    ids = pa.array(sorted(late_ids), pa.int64())
    late_stream = [t.filter(pc.is_in(t.column("id"), ids)) for t in batches]
    expected = batch_join(pa.concat_tables(late_stream), master.table(), "k", "key", ["pk", "v"])
    assert late_out == expected
    assert any(r[2] == 205 for r in expected)  # the inserted row of the former empty entry is joined
    assert not any(r[2] == 20 for r in late_out)  # the deleted row is gone
    assert all(str(r[3]).startswith("v1-") for r in late_out)
    assert op.totals()["matched_source_rows"] + op.totals()["unmatched_source_rows"] == op.totals()["tuples_in"]
