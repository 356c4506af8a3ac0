"""The array engine (fastcore + numba kernels) against the dict engine, and which one a plan gets.

Both engines see the same batches; their answers, deltas (as multisets: propagation order
may differ), dead letters (reason and position, in order), counters and ``last_seq`` must
agree after every batch; the fast engine's checkpoint restores a state that continues
identically.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cq.test_properties import _ddl, _frames, _sql, scenario
from cq_reference import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssbj.cli import main
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema
from ssbj.errors import ConfigError

TPCH = parse_schema((EXAMPLES / "tpch_schema.sql").read_text())


def _round(v: Any) -> Any:
    return round(v, 9) if isinstance(v, float) else v  # float sums depend on the order of ΔQ rows


def _ms(rows: list[tuple[Any, ...]]) -> list[str]:
    return sorted(repr(tuple(_round(v) for v in r)) for r in rows)


def _same_batch(fast: ContinuousQuery, ref: ContinuousQuery, batch: dict[str, pa.Table], where: str) -> None:
    df, dr = fast.apply(batch), ref.apply(batch)
    assert _ms(df.removed) == _ms(dr.removed), where
    assert _ms(df.added) == _ms(dr.added), where
    assert (df.seq, df.applied) == (dr.seq, dr.applied), where
    assert df.dead == dr.dead, where
    assert _ms([tuple(r.values()) for r in fast.result().to_pylist()]) == _ms(
        [tuple(r.values()) for r in ref.result().to_pylist()]
    ), where


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sc=scenario(), ckpt=st.integers(0, 4))
def test_fast_equals_reference_on_random_schemas(sc: dict[str, Any], ckpt: int, tmp_path: Path) -> None:
    sc["dag"] = None  # assertion keys are the dict engine's alone
    sql = _sql(sc)
    plan = plan_query(sql, parse_schema(_ddl(sc)))
    fast, ref = ContinuousQuery(plan, engine="fast"), ContinuousQuery(plan, engine="reference")
    assert (fast.engine, ref.engine) == ("fast", "reference")
    steps = sc["steps"]
    bounds = sorted({0, len(steps), *(c for c in sc["cuts"] if c < len(steps))})
    for b, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        _same_batch(fast, ref, _frames(sc, steps[lo:hi], lo), f"batch {b}")
        if b == ckpt:  # a restored fast engine continues exactly
            where = tmp_path / f"ck{abs(hash(sql))}-{b}"
            fast.checkpoint(where, b)
            restored, _ = ContinuousQuery.restore(plan, where)
            assert restored.engine == "fast" and restored.state() == fast.state()
            restored.dead_letters = fast.dead_letters
            fast = restored


_TYPED_DDL = """
create table dim (dk integer primary key, name varchar(10), w double, day date, flag boolean,
                  big decimal(38, 6));
create table fact (id bigint primary key, dk integer references dim(dk), amt decimal(12, 2), qty integer, f real);
"""
_TYPED_SQL = """
select d.name, d.flag, d.day, sum(f.amt) as s_amt, sum(f.qty * d.w) as s_w, avg(f.f) as a_f,
       count(d.w) as c_w, sum(d.big) as s_big, count(*) as n
from fact f, dim d where f.dk = d.dk and (d.name is null or d.name <> 'skip') group by d.name, d.flag, d.day
"""


def _typed_batches(rng: np.random.Generator) -> list[dict[str, pa.Table]]:
    dim_s = pa.schema(
        [
            ("dk", pa.int32()),
            ("name", pa.string()),
            ("w", pa.float64()),
            ("day", pa.date32()),
            ("flag", pa.bool_()),
            ("big", pa.decimal128(38, 6)),
            ("_op", pa.string()),
            ("_seq", pa.int64()),
        ]
    )
    fact_s = pa.schema(
        [
            ("id", pa.int64()),
            ("dk", pa.int32()),
            ("amt", pa.decimal128(12, 2)),
            ("qty", pa.int32()),
            ("f", pa.float32()),
            ("_op", pa.string()),
            ("_seq", pa.int64()),
        ]
    )
    names = ["a", "b", None, "skip", "ünï"]
    seq = 0
    dims: dict[int, dict[str, Any]] = {}
    facts: dict[int, dict[str, Any]] = {}
    out = []
    for _ in range(12):
        d_rows, f_rows = [], []
        for _ in range(int(rng.integers(5, 40))):
            seq += 1
            if rng.random() < 0.3:
                k = int(rng.integers(0, 8))
                if k in dims and rng.random() < 0.6:
                    d_rows.append({**dims.pop(k), "_op": "-", "_seq": seq})
                else:
                    big = decimal.Decimal(int(rng.integers(-(10**15), 10**15))) * 10**15 / decimal.Decimal(10**6)
                    row = {
                        "dk": k,
                        "name": names[int(rng.integers(0, len(names)))],
                        "w": None if rng.random() < 0.1 else float(rng.normal()),
                        "day": datetime.date(2020, 1, 1) + datetime.timedelta(days=int(rng.integers(0, 3))),
                        "flag": None if rng.random() < 0.2 else bool(rng.random() < 0.5),
                        "big": big,
                    }
                    dims.setdefault(k, row)
                    d_rows.append({**row, "_op": "+", "_seq": seq})
            else:
                k = int(rng.integers(0, 60))
                if k in facts and rng.random() < 0.5:
                    f_rows.append({**facts.pop(k), "_op": "-", "_seq": seq})
                else:
                    row = {
                        "id": k,
                        "dk": None if rng.random() < 0.05 else int(rng.integers(0, 9)),
                        "amt": None if rng.random() < 0.1 else decimal.Decimal(int(rng.integers(-9999, 9999))) / 100,
                        "qty": int(rng.integers(0, 5)),
                        "f": float(rng.normal()),
                    }
                    facts.setdefault(k, row)
                    f_rows.append({**row, "_op": "+", "_seq": seq})
        batch = {}
        if d_rows:
            batch["dim"] = pa.Table.from_pylist(d_rows, schema=dim_s)
        if f_rows:
            batch["fact"] = pa.Table.from_pylist(f_rows, schema=fact_s)
        out.append(batch)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_equals_reference_on_every_slot_type(seed: int, tmp_path: Path) -> None:
    """Strings (dictionary codes), doubles, dates, booleans, decimal(38) and NULLs."""
    plan = plan_query(_TYPED_SQL, parse_schema(_TYPED_DDL))
    fast, ref = ContinuousQuery(plan), ContinuousQuery(plan, engine="reference")
    assert fast.engine == "fast"
    for b, batch in enumerate(_typed_batches(np.random.default_rng(seed))):
        _same_batch(fast, ref, batch, f"batch {b}")
        if b == 5:
            fast.checkpoint(tmp_path, b)
            restored, _ = ContinuousQuery.restore(plan, tmp_path)
            assert restored.engine == "fast" and restored.state() == fast.state()
            restored.dead_letters = fast.dead_letters
            fast = restored
    assert len(fast.dead_letters) == len(ref.dead_letters)


def test_engine_selection() -> None:
    q7 = plan_query((EXAMPLES / "q7.sql").read_text(), TPCH)
    assert ContinuousQuery(q7).engine == "fast"
    assert ContinuousQuery(q7, engine="reference").engine == "reference"
    q5 = plan_query((EXAMPLES / "q5.sql").read_text(), TPCH)  # an assertion key
    assert ContinuousQuery(q5).engine == "reference"
    with pytest.raises(ConfigError, match="assertion keys"):
        ContinuousQuery(q5, engine="fast")
    text = parse_schema(
        "create table p (k varchar(5) primary key, c varchar(5) references c(k));"
        "create table c (k varchar(5) primary key, v integer);"
    )
    strings = plan_query("select sum(c.v) as s from p, c where p.c = c.k", text)
    assert ContinuousQuery(strings).engine == "reference"
    with pytest.raises(ConfigError, match="integer keys only"):
        ContinuousQuery(strings, engine="fast")
    with pytest.raises(ConfigError, match="engine"):
        ContinuousQuery(q7, engine="numba")


def test_growth_and_complete_deletion_leave_no_entry() -> None:
    """Tables grow across many small batches; deleting everything empties the hash and frees every slot."""
    ddl = (
        "create table c (k integer primary key, g integer);"
        "create table p (k bigint primary key, c integer references c(k), v integer);"
    )
    plan = plan_query(
        "select c.g, sum(p.v) as s, count(*) as n from p, c where p.c = c.k group by c.g", parse_schema(ddl)
    )
    cq = ContinuousQuery(plan)
    assert cq.fast is not None
    rng = np.random.default_rng(0)
    n_c, n_p = 300, 5_000
    events = [("c", "+", k) for k in range(n_c)] + [("p", "+", k) for k in range(n_p)]
    rng.shuffle(events)  # children before parents and after
    dels = [("c", "-", k) for k in range(n_c)] + [("p", "-", k) for k in range(n_p)]
    rng.shuffle(dels)
    events += dels
    pc_of = rng.integers(0, n_c + 20, size=n_p)  # some parents never find their child
    for lo in range(0, len(events), 700):
        rows: dict[str, list[dict[str, Any]]] = {"c": [], "p": []}
        for off, (rel, op, k) in enumerate(events[lo : lo + 700]):
            if rel == "c":
                rows["c"].append({"k": k, "g": k % 7, "_op": op, "_seq": lo + off})
            else:
                rows["p"].append({"k": k, "c": int(pc_of[k]), "v": k % 11, "_op": op, "_seq": lo + off})
        cq.apply({r: pa.Table.from_pylist(v) for r, v in rows.items() if v})
        if lo == 7_000:
            assert cq.result().num_rows == 7  # everything is in: all seven groups
    assert cq.result().num_rows == 0 and not cq.dead_letters and cq.applied == len(events)
    assert int(cq.fast.cnt[0]) == 0  # no hash entry left (keys, index heads, presence)
    assert int(cq.fast.cnt[1]) == int(cq.fast.cnt[2])  # every slot on the free list
    assert not cq.fast.t_live[: int(cq.fast.cnt[2])].any()


def test_maintain_command_engines_agree(tmp_path: Path) -> None:
    """``ssbj maintain --engine fast`` and ``--engine reference`` write the same answer and dead letters."""
    batches = _typed_batches(np.random.default_rng(7))
    (tmp_path / "changes").mkdir()
    for rel in ("dim", "fact"):
        pq.write_table(pa.concat_tables([b[rel] for b in batches if rel in b]), tmp_path / "changes" / f"{rel}.parquet")
    (tmp_path / "q.sql").write_text(_TYPED_SQL)
    (tmp_path / "s.sql").write_text(_TYPED_DDL)
    out = {}
    for engine in ("fast", "reference"):
        rc = main(
            [
                "maintain",
                "--sql", str(tmp_path / "q.sql"),
                "--schema", str(tmp_path / "s.sql"),
                "--changes", str(tmp_path / "changes"),
                "--out", str(tmp_path / f"{engine}.parquet"),
                "--dead-letters", str(tmp_path / f"{engine}.dead.parquet"),
                "--batch-rows", "37",
                "--engine", engine,
            ]
        )  # fmt: skip
        assert rc == 0
        out[engine] = (
            pq.read_table(tmp_path / f"{engine}.parquet"),
            pq.read_table(tmp_path / f"{engine}.dead.parquet"),
        )
    (fast, fast_dead), (ref, ref_dead) = out["fast"], out["reference"]
    assert fast.num_rows > 0 and fast_dead.num_rows > 0
    assert _ms([tuple(r.values()) for r in fast.to_pylist()]) == _ms([tuple(r.values()) for r in ref.to_pylist()])
    assert fast_dead.equals(ref_dead)
