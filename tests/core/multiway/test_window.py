"""A second stream joined within an event-time window equals DuckDB's batch join, as multisets.

Random event times (within the allowed lateness, or with late rows whose count and rows are
checked), NULL keys and times, many-to-many on the window key, random interleaving of the
two streams' batches, masters joined to either stream (inner or left, held or scanned),
both waiting stores, checkpoint/restore at random steps.
"""

from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multiway_cases import multiset
from window_cases import duckdb_answer, late_rows, run_window, window_case

from ssbj.adapters.lsmstore import LsmStore
from ssbj.core.multiway import MemoryStore, MultiWayJoin, MultiWaySpec, StreamWindow, WaitingStateOverflow
from ssbj.errors import ConfigError, InputError

KINDS = st.tuples(*[st.sampled_from(["inner", "left"])] * 2)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    kinds=KINDS,
    hold=st.tuples(st.booleans(), st.booleans()),
    partition_rows=st.integers(1, 4),
    restarts=st.sets(st.integers(1, 25), max_size=3),
    store=st.sampled_from(["memory", "lsm-spill"]),
    window_kind=st.sampled_from(["inner", "left"]),
)
def test_window_equals_duckdb(
    seed: int,
    kinds: tuple[str, str],
    hold: tuple[bool, bool],
    partition_rows: int,
    restarts: set[int],
    store: str,
    window_kind: str,
) -> None:
    case = window_case(seed, kinds, window_kind=window_kind)
    factory = (
        (lambda: LsmStore(memtable_bytes=64 << 10, block_cache_bytes=0, spill_all=True)) if store != "memory" else None
    )
    out, op = run_window(
        case, 1 << 24, restarts, factory, hold={"u": hold[0], "p": hold[1]}, partition_rows=partition_rows
    )
    assert multiset(out) == duckdb_answer(case)
    s = op.stats()
    assert s["window_late"] == 0
    assert s["window_kept_rows"] == 0 and op.waiting_rows == 0
    if store == "memory":
        assert op.store.memory_bytes() == 0
    op.store.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    restarts=st.sets(st.integers(1, 25), max_size=2),
    window_kind=st.sampled_from(["inner", "left"]),
)
def test_late_rows_are_counted_and_handed_over(seed: int, restarts: set[int], window_kind: str) -> None:
    case = window_case(seed, ("inner", "left"), late_frac=0.2, window_kind=window_kind)
    late: list[tuple[str, pa.Table]] = []
    out, op = run_window(case, 1 << 24, restarts, late_sink=lambda a, t: late.append((a, t)))
    want = late_rows(case)
    got = {a: set() for a in "oc"}
    for a, t in late:
        got[a].update(t.column(f"{a}.id").to_pylist())
    assert got == want
    assert op.stats()["window_late"] == sum(len(v) for v in want.values())
    assert multiset(out) == duckdb_answer(case, without=want)


@pytest.mark.parametrize("window_kind", ["inner", "left"])
def test_restore_equals_uninterrupted_run(window_kind: str) -> None:
    case = window_case(11, ("inner", "inner"), n=200, window_kind=window_kind)
    plain, _ = run_window(case, 1 << 24, set())
    cut, op = run_window(case, 1 << 24, {3, 7, 8, 20})
    assert multiset(plain) == multiset(cut) == duckdb_answer(case)
    assert multiset(plain)  # the case has matches
    assert op.stats()["window_pairs"] > 0
    assert (op.stats()["window_null_extended"] > 0) == (window_kind == "left")


def test_kept_rows_are_evicted_and_counted_in_memory() -> None:
    case = window_case(5, ("inner", "inner"), n=400)
    op = MultiWayJoin(case.spec, case.masters, 1 << 24, hold={"u": True, "p": True})
    peak_rows = 0
    for alias, b in case.batches:
        op.process(b, alias)
        peak_rows = max(peak_rows, op.stats()["window_kept_rows"])
        assert op.memory()["waiting_store"] == op.store.memory_bytes()
    s = op.stats()
    # watermarks advance: far fewer rows kept than admitted
    assert 0 < peak_rows < s["window_rows_in"] / 2
    assert s["window_evicted_rows"] > 0


def test_kept_rows_overflow_the_budget_with_a_clear_error() -> None:
    case = window_case(5, ("inner", "inner"), n=400)
    big = StreamWindow(**{**case.spec.window.__dict__, "lateness": timedelta(days=1)})  # type: ignore[union-attr]
    spec = MultiWaySpec(**{**case.spec.__dict__, "window": big})
    # the same budget holds the run whose watermarks advance ...
    out, _ = run_window(case, 8_000, set(), hold={"u": True, "p": True})
    assert multiset(out) == duckdb_answer(case)
    # ... and refuses the one that keeps every row (lateness of a day)
    op = MultiWayJoin(spec, case.masters, 8_000, hold={"u": True, "p": True}, store=MemoryStore())
    with pytest.raises(WaitingStateOverflow):
        for alias, b in case.batches:
            op.process(b, alias)


def test_bad_window_specs_and_inputs() -> None:
    case = window_case(1, ("inner", "inner"))
    w = case.spec.window
    assert w is not None
    with pytest.raises(ConfigError, match="ints or all timedeltas"):
        MultiWaySpec(**{**case.spec.__dict__, "window": StreamWindow(**{**w.__dict__, "lower": 5})})
    with pytest.raises(ConfigError, match="non-empty key"):
        MultiWaySpec(**{**case.spec.__dict__, "window": StreamWindow(**{**w.__dict__, "keys": (), "probe_keys": ()})})
    tracked = MultiWayJoin(case.spec, case.masters, 1 << 24, track_sources=True)
    with pytest.raises(InputError, match="__ssbj_src"):
        tracked.process(
            case.batches[0][1].append_column("__ssbj_src", pa.array([0] * case.batches[0][1].num_rows)), "o"
        )
    op = MultiWayJoin(case.spec, case.masters, 1 << 24)
    with pytest.raises(InputError, match="not a stream"):
        op.process(case.batches[0][1], "u")
    ints = MultiWaySpec(
        **{**case.spec.__dict__, "window": StreamWindow(**{**w.__dict__, "lower": 1, "upper": 1, "lateness": 0})}
    )
    op = MultiWayJoin(ints, case.masters, 1 << 24)
    with pytest.raises(ConfigError, match="needs interval bounds"):
        op.process(case.batches[0][1], case.batches[0][0])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    kinds=KINDS,
    restarts=st.sets(st.integers(1, 25), max_size=2),
    window_kind=st.sampled_from(["inner", "left"]),
    hold=st.booleans(),
)
def test_source_rows_reconcile_per_stream(
    seed: int, kinds: tuple[str, str], restarts: set[int], window_kind: str, hold: bool
) -> None:
    """With source tracking, each stream's rows in = output + dropped + late + waiting, after every restart.

    A stream row is *output* iff its id is in the result (checked against DuckDB's answer).
    """
    case = window_case(seed, kinds, late_frac=0.15, window_kind=window_kind)
    late: list[tuple[str, pa.Table]] = []
    out, op = run_window(
        case,
        1 << 24,
        restarts,
        track_sources=True,
        late_sink=lambda a, t: late.append((a, t)),
        hold={"u": hold, "p": hold},
        partition_rows=2,
    )
    want_late = late_rows(case)
    assert multiset(out) == duckdb_answer(case, without=want_late)
    got_late = {a: set() for a in "oc"}
    for a, t in late:
        got_late[a].update(t.column(f"{a}.id").to_pylist())
        assert f"{a}.__ssbj_src" in t.column_names
    assert got_late == want_late
    res = pa.concat_tables([t for t in out if t.num_rows]) if any(t.num_rows for t in out) else None
    output_ids = {
        "o": set(res.column("oid").drop_null().to_pylist()) if res is not None else set(),
        "c": set(res.column("cid").drop_null().to_pylist()) if res is not None else set(),
    }
    counts = op.stream_counts()
    for a in "oc":
        rows_in = sum(b.num_rows for x, b in case.batches if x == a)
        c = counts[a]
        assert c["waiting"] == 0
        assert c["rows_in"] == rows_in
        assert c["rows_in"] == c["output"] + c["dropped"] + c["late"]
        assert c["late"] == len(want_late[a])
        assert c["output"] == len(output_ids[a])
    op.store.close()
