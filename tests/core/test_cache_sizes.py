"""H_R's index is rebuilt at the index load, and the cache inequality prices it at that load."""

from __future__ import annotations

import pyarrow as pa

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.cache import INDEX_LOAD
from ssbj.core.hashing import KeyedTable, capacity_for


def test_index_is_rebuilt_at_its_load_and_priced_at_it() -> None:
    master = pa.table({"mk": pa.array(list(range(40)) * 2, pa.int64()), "mv": pa.array(range(80), pa.int64())})
    hot = list(range(0, 40, 3)) * 3  # 3 tuples per step: 12 in H_S per R-cycle (k = 4), above admission
    stream = pa.table({"sk": pa.array(hot * 200, pa.int64()), "sid": pa.array(range(len(hot) * 200), pa.int64())})
    spec = JoinSpec("sk", "mk", ("mv",), chunk_bytes=len(hot) * 16)
    op = SemiStreamJoin(spec, ArrowMaster(master, 20), stream.schema, master.schema)
    for b in stream.to_batches(max_chunksize=len(hot)):
        op.push(b)
        op.step()
    assert op.cache.values >= 5  # hot values with two rows and several tuples per R-cycle switched in
    assert op.cache.index.cap == capacity_for(op.cache.values, INDEX_LOAD)
    assert op.entry_cost() == KeyedTable.bytes_for(1, 4, 4) / INDEX_LOAD
