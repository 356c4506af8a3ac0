"""The continuous-query processor without Spark: Q7 over Debezium records equals DuckDB after every batch.

Kafka-style records (relation, value, topic, partition, offset) and landed files go through
:class:`CqProcessor` into a SQLite result table, Parquet deltas and dead letters; replays
(the same batch id again, in the same process or after a restart from the checkpoint)
change nothing; the deltas folded in batch order give the result table.
"""

from __future__ import annotations

import decimal
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from cq_pipeline_cases import RELATIONS, Q7Case, build_case, split
from cq_reference import EXAMPLES, canon

from ssbj.adapters.result_table import RESULT_FILE, ParquetResultFile, SqlResultTable
from ssbj.adapters.sink_parquet import ParquetDirSink
from ssbj.config_cq import parse_cq_config
from ssbj.core.checkpoint import DirectoryStore
from ssbj.cq.debezium import decode
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema
from ssbj.pipeline.cq_job import read_snapshot
from ssbj.pipeline.cq_processor import CqProcessor
from ssbj.pipeline.cq_records import RAW_COLUMNS, decode_batch

SCHEMA = parse_schema((EXAMPLES / "tpch_schema.sql").read_text())
BATCHES = 4


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Q7Case:
    return build_case(tmp_path_factory.mktemp("tpch") / "sf0.01", orders=300)


def _kafka_raw(batch: dict[str, list[tuple[int, bytes | None]]]) -> pa.Table:
    rows: dict[str, list[Any]] = {c: [] for c in RAW_COLUMNS}
    for rel, msgs in batch.items():
        for offset, value in msgs:
            for c, v in zip(RAW_COLUMNS, (rel, value, f"tpch.{rel}", 0, offset, None), strict=True):
                rows[c].append(v)
    schema = pa.schema([("relation", pa.string()), ("value", pa.binary()), ("topic", pa.string())])
    schema = schema.append(pa.field("partition", pa.int32())).append(pa.field("offset", pa.int64()))
    return pa.table(rows, schema=schema.append(pa.field("path", pa.string())))


def _batches(case: Q7Case, parts: int) -> list[tuple[pa.Table, dict[str, int]]]:
    """Raw batches (a chunk of every relation's topic each) and the records consumed after each."""
    chunks = {r: list(split(case.records[r], parts)) for r in RELATIONS}
    out, upto = [], dict.fromkeys(RELATIONS, 0)
    for b in range(parts):
        batch = {}
        for r in RELATIONS:
            msgs = chunks[r][b]
            batch[r] = [(upto[r] + i, m) for i, m in enumerate(msgs)]
            upto[r] += len(msgs)
        out.append((_kafka_raw(batch), dict(upto)))
    return out


def _processor(root: Path, plan: Any, db: Path, full_every: int) -> CqProcessor:
    # every batch here loads a quarter of the data: allow increments of any size, to take that path
    return CqProcessor(
        plan,
        DirectoryStore(root / "ck"),
        ParquetDirSink(root / "dead"),
        result=SqlResultTable(f"sqlite:///{db}", "q7_live"),
        deltas=ParquetDirSink(root / "deltas"),
        full_every=full_every,
        max_increment=2.0,
    )


def _table(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT supp_nation, cust_nation, l_year, revenue FROM q7_live").fetchall()
    # SQLite keeps a DECIMAL as a double: back to the 4 decimals of the sum
    return canon([(a, b, y, decimal.Decimal(f"{v:.4f}")) for a, b, y, v in rows])


def _folded_deltas(path: Path) -> list[tuple[Any, ...]]:
    t = ds.dataset(path, format="parquet").to_table().sort_by([("ssbj_batch_id", "ascending")])
    answer: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for b in sorted(set(t.column("ssbj_batch_id").to_pylist())):
        rows = t.filter(pc.equal(t.column("ssbj_batch_id"), b)).to_pylist()
        for r in rows:
            if r["_op"] == "-":
                del answer[(r["supp_nation"], r["cust_nation"], r["l_year"])]
        for r in rows:
            if r["_op"] == "+":
                key = (r["supp_nation"], r["cust_nation"], r["l_year"])
                assert key not in answer
                answer[key] = (*key, r["revenue"])
    return canon(list(answer.values()))


@pytest.mark.parametrize("full_every", [1, 3])
def test_q7_after_every_batch_with_replays_and_a_restart(case: Q7Case, tmp_path: Path, full_every: int) -> None:
    """full_every 3: batches 1 and 2 are checkpointed as increments (dirty rows) on top of batch 0's state."""
    plan = plan_query(case.sql, SCHEMA)
    db = tmp_path / "wh.db"
    proc = _processor(tmp_path, plan, db, full_every)
    proc.open()
    batches = _batches(case, BATCHES)
    groups_seen = 0
    for b, (raw, upto) in enumerate(batches):
        proc.process(b, lambda out, raw=raw: decode_batch(raw, plan, {}, out))
        want = case.expected(upto)
        assert _table(db) == want, f"batch {b}"
        groups_seen = max(groups_seen, len(want))
        if b == 1:  # a replay in the same process: rolled back, applied again, written again
            proc.process(b, lambda out, raw=raw: decode_batch(raw, plan, {}, out))
            assert _table(db) == want
    assert groups_seen >= 2
    # a restart replays the last batch (its checkpoint written, Spark's commit lost)
    again = _processor(tmp_path, plan, db, full_every)
    raw, upto = batches[-1]
    again.process(BATCHES - 1, lambda out: decode_batch(raw, plan, {}, out))
    if full_every == 3:  # restored from batch 3's state plus the increment of batch 4
        assert again.base == "cq-3.pickle" and sorted(p.name for p in (tmp_path / "ck").glob("inc-*"))
    assert again.cq is not None and again.cq.state() == proc.cq.state()  # type: ignore[union-attr]
    final = case.expected()
    assert _table(db) == final
    assert _folded_deltas(tmp_path / "deltas") == [(*r[:3], r[3]) for r in final]
    dead = ds.dataset(tmp_path / "dead", format="parquet").to_table()
    assert dead.num_rows == case.bad
    assert all(p.startswith("tpch.") and p.count("/") == 2 for p in dead.column("position").to_pylist())
    reasons = " | ".join(dead.column("reason").to_pylist())
    for why in ("delete of a tuple that is not present", "insert of a primary key that is present", "not a Debezium"):
        assert why in reasons
    t = again.totals
    assert t.records_in == sum(len(v) for v in case.records.values())
    assert t.tombstones == sum(m is None for m in case.records["orders"])
    assert t.dead_letters == case.bad and (t.refused, t.undecodable) == (2, 3) and t.reconciled


def test_landed_files_and_a_snapshot_into_a_parquet_result(case: Q7Case, tmp_path: Path) -> None:
    """nation and supplier from a database snapshot, orders as Parquet change files, the rest as Debezium lines."""
    db = tmp_path / "src.db"
    eng = sa.create_engine(f"sqlite:///{db}")
    with eng.begin() as conn:
        for rel in ("nation", "supplier"):
            t = pa.Table.from_pylist(case.rows[rel])
            cols = ", ".join(
                f"{c} TEXT" if pa.types.is_string(t.schema.field(c).type) else f"{c}" for c in t.column_names
            )
            conn.exec_driver_sql(f"CREATE TABLE {rel} ({cols})")
            marks = ", ".join("?" for _ in t.column_names)
            rows = [tuple(str(v) if isinstance(v, decimal.Decimal) else v for v in r.values()) for r in t.to_pylist()]
            conn.exec_driver_sql(f"INSERT INTO {rel} VALUES ({marks})", rows)  # noqa: S608
    cfg = parse_cq_config(
        {
            "query": {"sql": case.sql, "ddl_file": str(EXAMPLES / "tpch_schema.sql")},
            "sources": {r: {"kind": "files", "path": str(tmp_path / r)} for r in ("lineitem", "orders", "customer")},
            "snapshot": {"url": f"sqlite:///{db}", "relations": ["nation", "supplier"]},
            "target": {
                "result": {"kind": "parquet", "path": str(tmp_path / "q7")},
                "dead_letter": {"kind": "parquet", "path": str(tmp_path / "dead")},
            },
            "checkpoint": str(tmp_path / "ck"),
        }
    )
    plan = cfg.plan
    formats = {"orders": "parquet"}
    proc = CqProcessor(
        plan,
        DirectoryStore(cfg.engine_checkpoint),
        ParquetDirSink(tmp_path / "dead"),
        result=ParquetResultFile(tmp_path / "q7"),
        snapshot=read_snapshot(cfg),
    )
    proc.open()
    # the snapshot stands for the load records of nation and supplier (their later records are not read)
    upto = dict.fromkeys(RELATIONS, 0) | {r: len(case.rows[r]) for r in ("nation", "supplier")}
    for b in range(2):
        rows: dict[str, list[Any]] = {c: [] for c in RAW_COLUMNS}
        for rel in ("lineitem", "orders", "customer"):
            chunk = list(split(case.records[rel], 2))[b]
            upto[rel] += len(chunk)
            if rel == "orders":
                content = _orders_parquet(case, chunk, plan)
            else:
                content = b"\n".join(m for m in chunk if m is not None)
            for c, v in zip(RAW_COLUMNS, (rel, content, None, None, None, f"file:/land/{rel}/{b:03d}"), strict=True):
                rows[c].append(v)
        raw = pa.table(rows)
        proc.process(b, lambda out, raw=raw: decode_batch(raw, plan, formats, out))
        got = canon([tuple(r.values()) for r in pq.read_table(tmp_path / "q7" / RESULT_FILE).to_pylist()])
        assert got == case.expected(upto), f"batch {b}"
    dead = ds.dataset(tmp_path / "dead", format="parquet").to_table().column("position").to_pylist()
    assert any(p.startswith("file:/land/lineitem/") and p.rsplit(":", 1)[1].isdigit() for p in dead)
    assert any(p.startswith("file:/land/orders/") and ":row " in p for p in dead)


def _orders_parquet(case: Q7Case, chunk: list[bytes | None], plan: Any) -> bytes:
    """Debezium records of orders as Parquet change rows (``_op``), via the decoder's own conversion."""
    t, _, _ = decode([m for m in chunk if m is not None], plan.tables["orders"], "orders", 0)
    buf = pa.BufferOutputStream()
    pq.write_table(t.drop_columns(["_seq", "_pos"]), buf)
    return buf.getvalue().to_pybytes()
