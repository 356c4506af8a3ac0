"""Invalid changes are dead-lettered with reason and position, never applied; ``ssbj maintain`` end to end."""

from __future__ import annotations

import decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cq_reference import EXAMPLES, PK, Changes, Snapshot, assert_same, duckdb_rows, shuffled_inserts, tpch_data

from ssbj.cli import main
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema
from ssbj.errors import ConfigError

DDL = """
create table c (ck integer primary key, name varchar(5) not null, nk integer references n(nk));
create table n (nk integer primary key, nname char(3));
create table o (ok integer primary key, ck integer references c(ck), amount decimal(6,2));
"""
SQL = (
    "select n.nname, count(*) as cnt, sum(amount) as total "
    "from o join c on o.ck = c.ck join n on c.nk = n.nk group by n.nname"
)


def _frame(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema)


def test_invalid_changes_are_dead_lettered_not_applied() -> None:
    cq = ContinuousQuery(plan_query(SQL, parse_schema(DDL)))
    n_schema = pa.schema([("nk", pa.int64()), ("nname", pa.string()), ("_op", pa.string()), ("_seq", pa.int64())])
    c_schema = pa.schema(
        [("ck", pa.int64()), ("name", pa.string()), ("nk", pa.int64()), ("_op", pa.string()), ("_seq", pa.int64())]
    )
    o_schema = pa.schema(
        [("ok", pa.int64()), ("ck", pa.int64()), ("amount", pa.string()), ("_op", pa.string()), ("_seq", pa.int64())]
    )
    batch = {
        # the order arrives before its customer and nation: it stays non-live, then becomes live
        "o": _frame(
            [
                {"ok": 1, "ck": 10, "amount": "5.25", "_op": "+", "_seq": 0},
                {"ok": 1, "ck": 10, "amount": "1.00", "_op": "+", "_seq": 5},  # second insert of a present key
                {"ok": 2, "ck": 10, "amount": "12345.678", "_op": "+", "_seq": 6},  # does not fit decimal(6,2)
                {"ok": 3, "ck": 10, "amount": "1.00", "_op": "-", "_seq": 7},  # delete of a missing tuple
                {"ok": 4, "ck": 10, "amount": "2.00", "_op": "?", "_seq": 8},  # bad _op
                {"ok": 5, "ck": 10, "amount": "2.00", "_op": "+", "_seq": 11},  # _seq 11 twice: neither is first
                {"ok": 6, "ck": 10, "amount": "2.00", "_op": "+", "_seq": 11},
                {"ok": None, "ck": 10, "amount": "2.00", "_op": "+", "_seq": 9},  # NULL key
            ],
            o_schema,
        ),
        "c": _frame(
            [
                {"ck": 10, "name": "ann", "nk": 1, "_op": "+", "_seq": 3},
                {"ck": 11, "name": "toolongname", "nk": 1, "_op": "+", "_seq": 4},  # longer than varchar(5)
                {"ck": 12, "name": None, "nk": 1, "_op": "+", "_seq": 10},  # NULL in NOT NULL
            ],
            c_schema,
        ),
        "n": _frame([{"nk": 1, "nname": "FRA", "_op": "+", "_seq": 2}], n_schema),
    }
    delta = cq.apply(batch)
    reasons = sorted((d.relation, d.seq, d.position, d.reason.split(":")[0]) for d in delta.dead)
    assert reasons == [
        ("c", 4, 1, "name"),
        ("c", 10, 2, "name"),
        ("o", 5, 1, "insert of a primary key that is present"),
        ("o", 6, 2, "amount"),
        ("o", 7, 3, "delete of a tuple that is not present"),
        ("o", 8, 4, "_op is not '+' or '-'"),
        ("o", 9, 7, "ok"),
        ("o", 11, 5, "_seq repeats or is not after the last applied change"),
        ("o", 11, 6, "_seq repeats or is not after the last applied change"),
    ]
    assert cq.result().to_pylist() == [{"nname": "FRA", "cnt": 1, "total": decimal.Decimal("5.25")}]
    assert delta.added == [("FRA", 1, decimal.Decimal("5.25"))] and delta.removed == []
    # a later batch whose _seq is not after the last applied change is dead-lettered too
    late = cq.apply({"n": _frame([{"nk": 2, "nname": "GER", "_op": "+", "_seq": 1}], n_schema)})
    assert [d.reason for d in late.dead] == ["_seq repeats or is not after the last applied change"]
    # the customer leaves: the order goes non-live and its group disappears
    gone = cq.apply({"c": _frame([{"ck": 10, "name": "ann", "nk": 1, "_op": "-", "_seq": 20}], c_schema)})
    assert gone.removed == [("FRA", 1, decimal.Decimal("5.25"))] and gone.added == []
    assert cq.result().num_rows == 0
    assert cq.nbytes() > 0


def _replay(deltas: pa.Table) -> list[tuple[Any, ...]]:
    """The answer rebuilt from the deltas alone."""
    rows: dict[tuple[Any, ...], int] = {}
    cols = [c for c in deltas.column_names if c not in ("_op", "_seq")]
    seqs = deltas.column("_seq").to_pylist()
    assert seqs == sorted(seqs)
    for r in deltas.to_pylist():
        key = tuple(r[c] for c in cols)
        rows[key] = rows.get(key, 0) + (1 if r["_op"] == "+" else -1)
        assert rows[key] >= 0
    return [k for k, v in rows.items() for _ in range(v)]


@pytest.fixture(scope="module")
def tpch_small(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pa.Table]:
    return tpch_data(0.01, tmp_path_factory.mktemp("tpch") / "sf0.01")


def test_maintain_command_q3(tpch_small: dict[str, pa.Table], tmp_path: Path) -> None:
    sql = (EXAMPLES / "q3.sql").read_text()
    rels = ["customer", "orders", "lineitem"]
    rng = np.random.default_rng(4)
    ch = Changes({r: tpch_small[r] for r in rels})
    ch.events = shuffled_inserts(ch.versions, rng, rels)
    # cancel 100 orders (their lines first) and make one bad change
    okeys = tpch_small["lineitem"].column("l_orderkey").to_numpy()
    for i in rng.choice(tpch_small["orders"].num_rows, size=100, replace=False):
        ok = tpch_small["orders"].column("o_orderkey")[int(i)].as_py()
        ch.events += [("lineitem", "-", int(j)) for j in np.flatnonzero(okeys == ok)] + [("orders", "-", int(i))]
    ch.events.append(("orders", "-", int(i)))  # deleted twice: a dead letter
    ch.write_dir(tmp_path / "changes")
    out, deltas = tmp_path / "q3.parquet", tmp_path / "q3.deltas.parquet"
    rc = main(
        [
            "maintain",
            "--sql", str(EXAMPLES / "q3.sql"),
            "--schema", str(EXAMPLES / "tpch_schema.sql"),
            "--changes", str(tmp_path / "changes"),
            "--out", str(out),
            "--deltas", str(deltas),
            "--batch-rows", "7000",
        ]
    )  # fmt: skip
    assert rc == 0
    snap = Snapshot(ch.versions, PK)
    snap.apply(ch, 0, len(ch.events))
    result = pq.read_table(out)
    ref = duckdb_rows(sql, snap.tables(ch))
    assert result.num_rows == len(ref) > 0
    assert_same(result, ref, "ssbj maintain")
    assert sorted(map(str, _replay(pq.read_table(deltas)))) == sorted(
        map(str, (tuple(r.values()) for r in result.to_pylist()))
    )
    dead = pq.read_table(tmp_path / "q3.dead.parquet")
    assert dead.num_rows == 1 and dead.column("reason")[0].as_py() == "delete of a tuple that is not present"


def test_maintain_command_resumes_from_checkpoint(tpch_small: dict[str, pa.Table], tmp_path: Path) -> None:
    rels = ["customer", "orders", "lineitem"]
    ch = Changes({r: tpch_small[r] for r in rels})
    ch.events = shuffled_inserts(ch.versions, np.random.default_rng(9), rels)
    ch.write_dir(tmp_path / "changes")
    args = [
        "maintain",
        "--sql",
        str(EXAMPLES / "q3.sql"),
        "--schema",
        str(EXAMPLES / "tpch_schema.sql"),
        "--changes",
        str(tmp_path / "changes"),
    ]
    assert main([*args, "--out", str(tmp_path / "full.parquet"), "--batch-rows", "20000"]) == 0
    # a first run over a prefix, checkpointed; the second run resumes there
    ck = tmp_path / "ck"
    half = Changes(ch.versions)
    half.events = ch.events[: len(ch.events) // 2]
    half.write_dir(tmp_path / "half")
    prefix_args = [a if a != str(tmp_path / "changes") else str(tmp_path / "half") for a in args]
    assert (
        main(
            [
                *prefix_args,
                "--out",
                str(tmp_path / "half.parquet"),
                "--checkpoint-dir",
                str(ck),
                "--batch-rows",
                "20000",
            ]
        )
        == 0
    )
    assert (
        main([*args, "--out", str(tmp_path / "resumed.parquet"), "--checkpoint-dir", str(ck), "--batch-rows", "20000"])
        == 0
    )
    assert pq.read_table(tmp_path / "resumed.parquet").equals(pq.read_table(tmp_path / "full.parquet"))


def test_maintain_command_reports_unsupported_sql(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = tmp_path / "q.sql"
    q.write_text("select o_orderkey from orders limit 3")
    (tmp_path / "changes").mkdir()
    rc = main(
        [
            "maintain",
            "--sql",
            str(q),
            "--schema",
            str(EXAMPLES / "tpch_schema.sql"),
            "--changes",
            str(tmp_path / "changes"),
            "--out",
            str(tmp_path / "o.parquet"),
        ]
    )
    assert rc == 2 and "LIMIT is not supported" in capsys.readouterr().err


def test_upserts_keep_a_keyed_table_current_and_are_idempotent(tpch_small: dict[str, pa.Table]) -> None:
    sql = (EXAMPLES / "q10.sql").read_text()
    plan = plan_query(sql, parse_schema((EXAMPLES / "tpch_schema.sql").read_text()))
    rels = plan.relations()
    ch = Changes({r: tpch_small[r] for r in rels})
    rng = np.random.default_rng(2)
    ch.events = shuffled_inserts(ch.versions, rng, rels)
    okeys = tpch_small["lineitem"].column("l_orderkey").to_numpy()
    for i in rng.choice(tpch_small["orders"].num_rows, size=300, replace=False):
        ok = tpch_small["orders"].column("o_orderkey")[int(i)].as_py()
        ch.events += [("lineitem", "-", int(j)) for j in np.flatnonzero(okeys == ok)] + [("orders", "-", int(i))]
    cq = ContinuousQuery(plan)
    keys = [o.name for o in plan.outputs if o.key is not None]
    table: dict[tuple[Any, ...], dict[str, Any]] = {}
    for lo, hi in ch.batches(9_000):
        ups, dels = cq.upserts(cq.apply(ch.frames(lo, hi)))
        for _ in range(2):  # a retried batch: the same writes again change nothing
            for r in ups.to_pylist():
                r.pop("_seq")
                table[tuple(r[k] for k in keys)] = r
            for r in dels.to_pylist():
                table.pop(tuple(r[k] for k in keys), None)
        want = {tuple(r[k] for k in keys): r for r in cq.result().to_pylist()}
        assert table == want
    assert len(table) > 0
    with pytest.raises(ConfigError, match="upserts need a GROUP BY"):
        ContinuousQuery(
            plan_query("select o_orderkey from orders", parse_schema((EXAMPLES / "tpch_schema.sql").read_text()))
        ).upserts(cq.apply({}))
