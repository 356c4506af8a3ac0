"""Test data of the core operator: drawn key scenarios (hypothesis) and a drifting Zipf-1 stream.

Shared by the core operator's tests (tests/core/test_operator_properties.py, test_disk_chunks.py,
test_hybrid.py, test_complete_cache.py,
test_budget_enforced.py), so that a scenario means the same in each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st

from ssbj.core import ArrowMaster, SemiStreamJoin
from ssbj.core.checkpoint import DirectoryStore

KEY = st.one_of(st.none(), st.integers(0, 12))


def drifting_keys(draw: Any) -> tuple[list[int | None], list[int | None]]:
    """Draw master keys and a stream of two segments with different hot sets (the hot set drifts mid-stream)."""
    master_keys = draw(st.lists(KEY, max_size=40))
    hot1 = draw(st.lists(st.integers(0, 15), min_size=1, max_size=4))
    hot2 = draw(st.lists(st.integers(0, 15), min_size=1, max_size=4))
    seg1 = draw(st.lists(st.one_of(st.sampled_from(hot1), KEY), max_size=250))
    seg2 = draw(st.lists(st.one_of(st.sampled_from(hot2), KEY), max_size=250))
    return master_keys, seg1 + seg2


def key_tables(sc: dict[str, Any]) -> tuple[pa.Table, pa.Table]:
    """Return the stream (sid, sk) and master (mk, mval) of a scenario's keys; ``strings``: keys as "v<k>"."""
    conv = (lambda k: None if k is None else f"v{k}") if sc["strings"] else (lambda k: k)
    ktype = pa.string() if sc["strings"] else pa.int64()
    mk = [conv(k) for k in sc["master_keys"]]
    sk = [conv(k) for k in sc["stream_keys"]]
    master = pa.table({"mk": pa.array(mk, ktype), "mval": pa.array(range(len(mk)), pa.int64())})
    stream = pa.table({"sid": pa.array(range(len(sk)), pa.int64()), "sk": pa.array(sk, ktype)})
    return stream, master


def drifting(n_master: int, n_stream: int, seed: int = 3) -> tuple[pa.Table, pa.Table]:
    """R with repeated keys; a Zipf-1 stream whose hot set changes every quarter."""
    rng = np.random.default_rng(seed)
    master = pa.table(
        {
            "mid": np.arange(n_master, dtype=np.int64),
            "mk": rng.integers(0, n_master, n_master),
            "attr": rng.integers(0, 100, n_master),
        }
    )
    p = 1.0 / np.arange(1, n_master + 1)
    p /= p.sum()
    ranks = rng.choice(n_master, n_stream, p=p)
    keys = np.empty(n_stream, dtype=np.int64)
    for q in range(4):
        sl = slice(q * n_stream // 4, (q + 1) * n_stream // 4)
        keys[sl] = rng.permutation(n_master)[ranks[sl]]
    stream = pa.table({"sid": np.arange(n_stream, dtype=np.int64), "sk": keys})
    return stream, master


def checkpoint_after(op: SemiStreamJoin, stream: pa.Table, batch: int, steps: int, path: Path) -> DirectoryStore:
    """Push ``stream`` in batches of ``batch`` rows, run ``steps`` steps, checkpoint ``op`` (id 1) under ``path``."""
    for b in stream.to_batches(max_chunksize=batch):
        op.push(b)
    for _ in range(steps):
        op.step()
    store = DirectoryStore(path)
    op.checkpoint(store, 1)
    return store


class ScanOnly:
    """An in-memory master that can only scan (no MasterLookup), for the hybrid step's refusals."""

    def __init__(self, t: pa.Table) -> None:
        self._m = ArrowMaster(t, 2)
        self.partition_rows, self.num_rows = 2, t.num_rows

    def num_partitions(self) -> int:
        return self._m.num_partitions()

    def read_partition(self, p: int) -> pa.Table:
        return self._m.read_partition(p)

    def repartition(self, b: int) -> ScanOnly:
        return self
