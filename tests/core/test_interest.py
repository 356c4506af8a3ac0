"""The disk phase's interest filter: exact size, and checkpoints of the older bit mapping (ssbj.core.interest)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.hashing import mix
from ssbj.core.interest import BITS_PER_VALUE, Interest, interest_test


def test_filter_has_exactly_the_planned_words() -> None:
    f = Interest()
    keys = np.arange(1000, dtype=np.int64)
    f.rebuild(keys, expect=1000)
    assert f.bits.shape[0] == -(-1000 * BITS_PER_VALUE // 64)  # 250 words, not 256
    assert all(interest_test(f.bits, np.uint64(mix(int(k)))) for k in keys)


def _tracked(op: SemiStreamJoin) -> np.ndarray:
    st, cache = op.stats.table, op.cache
    return np.concatenate([st.keys[st.used], cache.index.keys[cache.index.used], cache.empties.keys])


def test_a_checkpoint_with_the_older_mask_mapping_is_restored_without_false_negatives(tmp_path: Any) -> None:
    rng = np.random.default_rng(3)
    master = pa.table({"mk": pa.array(np.arange(0, 400, 2), pa.int64()), "mval": pa.array(np.arange(200), pa.int64())})
    keys = np.minimum(rng.zipf(1.3, 6000), 600).astype(np.int64)  # hot values, some without master rows
    stream = pa.table({"sid": pa.array(np.arange(6000), pa.int64()), "sk": pa.array(keys)})
    spec = JoinSpec("sk", "mk", ("mval",), chunk_bytes=200 * 16)
    op = SemiStreamJoin(spec, ArrowMaster(master, 20), stream.schema, master.schema)
    for b in stream.to_batches(max_chunksize=200):
        op.push(b)
        op.step()
    tracked = _tracked(op)
    assert len(tracked) > 10
    store = DirectoryStore(tmp_path)
    op.checkpoint(store, 1)
    # rewrite it as the older format wrote it: a power of two of words, bit = (hash >> 8) & mask
    _, m = store.read_manifest(1)
    arrays = store.read_arrays(m["state"])
    words = 1 << int(np.ceil(np.log2(arrays["interest_bits"].shape[0])))
    old = np.zeros(words, dtype=np.uint64)
    for k in tracked:
        b = (int(mix(int(k))) >> 8) & (words * 64 - 1)
        old[b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    arrays["interest_bits"] = old
    del m["interest_mapping"]
    store.write_arrays(m["state"], arrays)
    store.write_manifest(1, m)
    r = SemiStreamJoin.restore(store, spec, ArrowMaster(master, 20), stream.schema, master.schema)
    assert r.interest.bits.shape[0] == words  # the size the budget saw
    assert all(interest_test(r.interest.bits, np.uint64(mix(int(k)))) for k in _tracked(r))
