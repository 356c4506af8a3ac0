"""The value statistics' candidate admission and sizing (ssbj.core.stats)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ssbj.core import ArrowMaster, JoinSpec, SemiStreamJoin
from ssbj.core.checkpoint import DirectoryStore
from ssbj.core.hashing import MAX_LOAD, KeyedTable, capacity_for
from ssbj.core.hs import ST_FIELDS
from ssbj.core.stats import ValueStats, candidate_bytes
from ssbj.core.switching import holds_all_of_r


def test_admission_is_break_even_of_a_one_row_value_times_the_factor() -> None:
    st = ValueStats()
    # the sizes: a waiting tuple ~44 B, a cached row 40 B, an index entry 42 B
    assert st.set_admission(44.0, 40.0, 42.0, 1.0) == int(np.ceil(2 * (82.0 + candidate_bytes()) / 44.0))
    assert st.meta[2] == 6
    # the paper's inequality on row bytes alone: two tuples, as Algorithm 1 with no entry bytes
    assert st.set_admission(16.0, 16.0, 0.0, 1.0, count_overheads=False) == 2
    assert st.set_admission(16.0, 0.0, 0.0, 1.0, count_overheads=False) == 2  # never below two


def test_table_is_sized_for_the_last_r_cycles_peak() -> None:
    st = ValueStats()
    budget = 1 << 20
    st.meta[0] = 0
    st.grow(budget)
    per = KeyedTable.bytes_for(1, ST_FIELDS, 4)
    st.limit_bytes(budget)  # nothing seen: a small table, not the whole share
    assert st.table.cap <= capacity_for(64)
    st.peak = 5000  # the last R-cycle held 5,000 candidates at its most
    st.limit_bytes(budget)
    assert st.table.cap * MAX_LOAD >= 5000 and st.table.cap * per <= budget
    assert st.peak == 0  # measured again from this R-cycle on
    st.peak = 10**7  # more than the share allows: the share caps it
    st.limit_bytes(budget)
    assert st.table.cap * per <= budget


def _stream(keys: list[int]) -> pa.Table:
    return pa.table({"sid": pa.array(range(len(keys)), pa.int64()), "sk": pa.array(keys, pa.int64())})


def _run(admit: int | None) -> tuple[SemiStreamJoin, set[int]]:
    """Value 5 has 10 tuples per step in H_S, value 6 one: which became candidates in the first R-cycle."""
    master = pa.table({"mk": pa.array([1, 2, 3, 4, 5, 6], pa.int64()), "mval": pa.array(range(6), pa.int64())})
    per_step = [5] * 10 + [6]
    stream = _stream(per_step * 3)
    spec = JoinSpec("sk", "mk", ("mval",), chunk_bytes=len(per_step) * 16)
    op = SemiStreamJoin(spec, ArrowMaster(master, 2), stream.schema, master.schema)
    seen: set[int] = set()
    for b in stream.to_batches(max_chunksize=len(per_step)):
        op.push(b)
        if admit is not None:
            op.stats.meta[2] = admit
        op.step()
        seen |= set(op.stats.entries()[0].tolist())
    return op, seen


def test_only_values_with_enough_tuples_in_hs_become_candidates() -> None:
    op, seen = _run(None)
    assert op.stats.meta[2] > 3  # value 6 never has more than 3 tuples in H_S (k = 3)
    assert seen == {5}
    _, seen2 = _run(2)  # Algorithm 1's own criterion: two tuples
    assert seen2 == {5, 6}


def test_admission_and_peak_survive_a_checkpoint(tmp_path: Any) -> None:
    op, _ = _run(None)
    op.stats.peak = 123
    store = DirectoryStore(tmp_path)
    op.checkpoint(store, 1)
    master = pa.table({"mk": pa.array([1, 2, 3, 4, 5, 6], pa.int64()), "mval": pa.array(range(6), pa.int64())})
    r = SemiStreamJoin.restore(store, op.spec, ArrowMaster(master, 2), _stream([]).schema, master.schema)
    assert r.stats.peak == 123 and r.stats.meta[2] == op.stats.meta[2]


def test_admission_is_two_tuples_when_the_budget_holds_all_of_r() -> None:
    st = ValueStats()
    assert st.set_admission(44.0, 40.0, 42.0, 1.0, resident=True) == 2 and st.meta[2] == 2


def _resident_after_one_r_cycle(budget: int) -> bool:
    master = pa.table({"mk": pa.array(range(200), pa.int64()), "mval": pa.array(range(200), pa.int64())})
    stream = _stream([i % 7 for i in range(400)])
    spec = JoinSpec("sk", "mk", ("mval",), chunk_bytes=40 * 16, memory_budget=budget)
    op = SemiStreamJoin(spec, ArrowMaster(master, 50), stream.schema, master.schema)
    assert not holds_all_of_r(op)  # R not scanned yet: unknown
    for b in stream.to_batches(max_chunksize=40):
        op.push(b)
        op.step()
    assert op.r_cycle >= 2
    return holds_all_of_r(op)


def test_holds_all_of_r_compares_r_with_the_budget() -> None:
    # 200 rows x (v_R 8 B + tag 4 + entry ~33 B) ~ 9 kB, a 50-row disk buffer, H_S's tenth
    assert _resident_after_one_r_cycle(1 << 20)
    assert not _resident_after_one_r_cycle(6_000)
