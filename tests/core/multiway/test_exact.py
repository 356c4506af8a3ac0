"""run_query / MultiWayJoin equal DuckDB's answer to the same SQL, as multisets.

Random data (NULL keys, duplicates on both sides, keys without master rows), inner and
left edges, chains and stars, composite and cross-type keys, per-input filters, masters
held whole or scanned in partitions (with and without their caches), both waiting stores,
every probe-order policy, and checkpoint/restore at random steps.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multiway_cases import chain_case, duckdb_answer, multiset, run_with_restarts, star_case

from ssbj.adapters.lsmstore import LsmStore
from ssbj.core.multiway import POLICIES, MemoryStore, run_query

KINDS = st.tuples(*[st.sampled_from(["inner", "left"])] * 3)


@st.composite
def runs(draw: st.DrawFn) -> dict:
    shape = draw(st.sampled_from(["star", "chain"]))
    kinds = draw(KINDS)
    seed = draw(st.integers(0, 10_000))
    case = star_case(seed, kinds, draw(st.booleans())) if shape == "star" else chain_case(seed, kinds)
    aliases = [m.alias for m in case.spec.masters]
    hold = {a: draw(st.booleans()) for a in aliases}
    sizes = draw(st.lists(st.integers(0, 60), min_size=1, max_size=4).filter(lambda s: sum(s) > 0))
    restarts = set(draw(st.lists(st.integers(1, 30), max_size=3)))
    store = draw(st.sampled_from(["memory", "lsm", "lsm-spill"]))
    options = {
        "hold": hold,
        "partition_rows": draw(st.integers(1, 12)),
        "use_cache": draw(st.booleans()),
        "order_policy": draw(st.sampled_from(POLICIES)),
        "period": draw(st.integers(1, 5)),
        # a chain's edge 1 probes edge 0's master: only orders with 0 before 1 are valid
        "initial_order": tuple(draw(st.permutations([0, 1, 2])))
        if shape == "star"
        else draw(st.sampled_from([(0, 1, 2), (0, 2, 1), (2, 0, 1)])),
    }
    if store == "lsm":
        options["store_factory"] = lambda: LsmStore(memtable_bytes=64 << 10, block_cache_bytes=0)
    elif store == "lsm-spill":
        options["store_factory"] = lambda: LsmStore(memtable_bytes=64 << 10, block_cache_bytes=0, spill_all=True)
    return {"case": case, "sizes": sizes, "restarts": restarts, "options": options}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_equals_duckdb(r: dict) -> None:
    case = r["case"]
    out, op = run_with_restarts(case, 1 << 24, r["sizes"], r["restarts"], **r["options"])
    assert multiset(out) == duckdb_answer(case)
    assert op.waiting_rows == 0
    op.store.close()


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_equals_duckdb_long(r: dict) -> None:
    test_equals_duckdb.hypothesis.inner_test(r)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kinds", [("inner",) * 3, ("left",) * 3, ("left", "inner", "left")])
def test_run_query_star_scanned_and_held(kinds: tuple[str, str, str]) -> None:
    case = star_case(7, kinds, True, n_stream=2000)
    stats: dict = {}
    got = multiset(
        list(
            run_query(
                case.spec,
                (case.stream.slice(i, 100) for i in range(0, 2000, 100)),
                case.masters,
                1 << 24,
                stats,
                hold={"a": True, "b": False, "c": False},
                partition_rows=4,
            )
        )
    )
    assert got == duckdb_answer(case)
    assert stats["masters"]["a"]["held"] and not stats["masters"]["b"]["held"]
    assert stats["tuples_in"] == 2000 and stats["waiting_rows"] == 0
    assert stats["output_rows"] == sum(got.values())


def test_output_names_and_cache_serves() -> None:
    case = chain_case(3, ("inner", "left", "left"), n_stream=3000)
    stats: dict = {}
    tables = list(
        run_query(
            case.spec,
            (case.stream.slice(i, 50) for i in range(0, 3000, 50)),
            case.masters,
            1 << 24,
            stats,
            hold={"c": False, "n": False, "p": False},
            partition_rows=3,
        )
    )
    assert all(t.column_names == ["okey", "cname", "nname", "pname"] for t in tables)
    assert multiset(tables) == duckdb_answer(case)
    # frequent values are served from the caches once they are complete
    assert stats["served_by_cache"] > 0


def test_memory_store_refuses_to_overrun() -> None:
    from ssbj.core.multiway import WaitingStateOverflow

    s = MemoryStore(limit=100)
    import numpy as np
    import pyarrow as pa

    t = pa.table({"x": np.arange(10)})
    s.put(0, 0, t, None)
    with pytest.raises(WaitingStateOverflow, match="LSM"):
        s.put(0, 1, t, None)
    assert s.memory_bytes() == t.nbytes


def test_bad_options_are_config_errors() -> None:
    from ssbj.core.multiway import MultiWayJoin
    from ssbj.errors import ConfigError

    case = chain_case(1, ("inner", "inner", "inner"))
    with pytest.raises(ConfigError, match="initial_order"):
        MultiWayJoin(case.spec, case.masters, 1 << 20, initial_order=(1, 0, 2))  # nation before customer
    with pytest.raises(ConfigError, match="order_policy"):
        MultiWayJoin(case.spec, case.masters, 1 << 20, order_policy="random")
    with pytest.raises(ConfigError, match="no room"):
        MultiWayJoin(case.spec, case.masters, 64, hold={"c": True, "n": True, "p": True})


def test_later_batches_are_cast_to_the_first_batch_types() -> None:
    import pyarrow as pa

    case = star_case(2, ("left", "left", "left"), False, n_stream=200)
    narrow = case.stream.slice(100).cast(
        pa.schema([f.with_type(pa.int32()) if f.name in ("ka", "kb", "kc") else f for f in case.stream.schema])
    )
    got = multiset(list(run_query(case.spec, [case.stream.slice(0, 100), narrow], case.masters, 1 << 24)))
    assert got == duckdb_answer(case)


def test_filter_on_a_missing_column_is_an_input_error() -> None:
    import dataclasses

    import pyarrow.compute as pc

    from ssbj.errors import InputError

    case = chain_case(4, ("inner", "inner", "inner"))
    spec = dataclasses.replace(case.spec, filters={"n": pc.field("no_such") == 1})
    with pytest.raises(InputError, match="filter on 'n'"):
        list(run_query(spec, [case.stream], case.masters, 1 << 24, hold={"c": True, "n": True, "p": True}))


@pytest.mark.parametrize(("budget", "completes"), [(120_000, False), (400_000, True), (2_000_000, True)])
def test_memory_stays_within_the_budget_or_stops(budget: int, completes: bool) -> None:
    from ssbj.core.multiway import MultiWayJoin, WaitingStateOverflow

    case = chain_case(8, ("left", "left", "inner"), n_stream=4000)
    op = MultiWayJoin(case.spec, case.masters, budget, hold={"c": False, "n": True, "p": False}, partition_rows=3)
    out = []
    try:
        for i in range(0, 4000, 200):
            out.append(op.process(case.stream.slice(i, 200)))
            assert op.memory()["total"] <= budget
        out += list(op.drain())
    except WaitingStateOverflow:
        assert not completes
        return
    assert completes
    assert op.stats()["peak_memory"] <= budget
    assert multiset(out) == duckdb_answer(case)


@pytest.mark.parametrize("held", [True, False])
def test_float_keys_nan_and_signed_zero_as_duckdb(held: bool) -> None:
    import duckdb
    import pyarrow as pa
    from multiway_cases import Case

    from ssbj.core.multiway import JoinEdge, MasterInput, MultiWaySpec, OutputColumn

    nan = float("nan")
    s = pa.table({"id": list(range(7)), "k": [1.5, nan, -0.0, None, 2.0, nan, 3.0]})
    m = pa.table({"k": [nan, 0.0, 1.5, 1.5, None, 3], "v": ["a", "b", "c", "d", "e", "f"]})
    m = m.cast(pa.schema([("k", pa.float64()), ("v", pa.string())]))
    spec = MultiWaySpec(
        stream="s",
        stream_columns=("id", "k"),
        masters=(MasterInput("m", "M", ("k", "v")),),
        edges=(JoinEdge("m", "s", ("k",), ("k",), "left"),),
        output=(OutputColumn("id", "s", "id"), OutputColumn("v", "m", "v")),
    )
    case = Case(spec, s, {"M": m}, "SELECT s.id, m.v FROM s LEFT JOIN M m ON m.k = s.k")
    got = multiset(list(run_query(spec, [s], case.masters, 1 << 24, hold={"m": held}, partition_rows=2)))
    assert got == duckdb_answer(case)
    con = duckdb.connect()
    assert con.execute("SELECT 'NaN'::DOUBLE = 'NaN'::DOUBLE").fetchone() == (True,)
