"""TPC-H Q7 change streams for the pipeline tests: Debezium envelopes per relation, and an independent oracle.

A small slice of TPC-H SF 0.01 (the orders of customers in Q7's two nations, their lines,
every supplier and nation) is inserted in a random interleaving (lines before their
orders, orders before their customers), then changed: lines updated (Debezium ``u``),
orders deleted with or without their lines, customers moving to another nation, lines
deleted and inserted again; and a few bad records: a delete of a missing key, a second
insert of a present key, a truncated JSON, an update without its ``before`` image, a text in
an integer column.  The oracle keeps the present rows per relation by key (a record
applies or is rejected by its own relation's history only) and asks DuckDB for Q7.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import json
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
from cq_reference import EXAMPLES, PK, canon, tpch_data

RELATIONS = ("lineitem", "orders", "customer", "supplier", "nation")
DELTA_KEY = ("supp_nation", "cust_nation", "l_year")
_EPOCH = dt.date(1970, 1, 1)


def q7_sql(data: dict[str, pa.Table]) -> tuple[str, list[str]]:
    """Q7 with its nation pair swapped for the two most common supplier nations (so groups exist)."""
    keys, counts = np.unique(data["supplier"].column("s_nationkey").to_numpy(), return_counts=True)
    top = [int(k) for k in keys[np.argsort(-counts, kind="stable")[:2]]]
    names = dict(
        zip(data["nation"].column("n_nationkey").to_pylist(), data["nation"].column("n_name").to_pylist(), strict=True)
    )
    sql = (EXAMPLES / "q7.sql").read_text()
    sql = sql.replace("'FRANCE'", f"'{names[top[0]]}'").replace("'GERMANY'", f"'{names[top[1]]}'")
    return sql, [names[top[0]], names[top[1]]]


def _json_value(v: Any) -> Any:
    if isinstance(v, dt.date):
        return (v - _EPOCH).days  # io.debezium.time.Date
    if isinstance(v, decimal.Decimal):
        return str(v)  # decimal.handling.mode=string
    return v


def envelope(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
    """A Debezium change event (the envelope with schema-less payload)."""

    def image(r: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if r is None else {k: _json_value(v) for k, v in r.items()}

    return json.dumps({"payload": {"op": op, "before": image(before), "after": image(after), "source": {}}}).encode()


def _key(relation: str, row: dict[str, Any]) -> Any:
    cols = PK[relation]
    return tuple(row[c] for c in cols) if len(cols) > 1 else row[cols[0]]


@dataclass
class Q7Case:
    """The records per relation (in topic order) and the oracle's rows per relation."""

    sql: str
    rows: dict[str, list[dict[str, Any]]]
    schemas: dict[str, pa.Schema]
    records: dict[str, list[bytes | None]] = field(default_factory=dict)
    bad: int = 0  # records that must become dead letters

    def add(self, relation: str, message: bytes | None) -> None:
        """Append a record to the relation's stream."""
        self.records.setdefault(relation, []).append(message)

    def expected(self, upto: dict[str, int] | None = None) -> list[tuple[Any, ...]]:
        """DuckDB's Q7 over the snapshot after the first ``upto[relation]`` records of each relation (all)."""
        present: dict[str, dict[Any, dict[str, Any]]] = {r: {} for r in RELATIONS}
        for rel in RELATIONS:
            msgs = self.records.get(rel, [])
            n = len(msgs) if upto is None else upto.get(rel, 0)
            have = present[rel]
            for m in msgs[:n]:
                apply_envelope(rel, m, have)
        return q7_answer(self.sql, present, self.rows, self.schemas)


def apply_envelope(relation: str, message: bytes | None, have: dict[Any, dict[str, Any]]) -> None:
    """The oracle: apply one record by key (an invalid record changes nothing)."""
    if message is None:
        return  # a tombstone
    try:
        p = json.loads(message)["payload"]
    except (ValueError, KeyError, TypeError):
        return
    op, before, after = p.get("op"), p.get("before"), p.get("after")
    steps = {"c": [("+", after)], "r": [("+", after)], "d": [("-", before)], "u": [("-", before), ("+", after)]}
    todo = steps.get(op)
    if todo is None or any(not isinstance(img, dict) for _, img in todo):
        return
    for img in (i for _, i in todo):
        for c in PK[relation]:
            if not isinstance(img.get(c), int):
                return  # does not fit the schema: dead-lettered whole
    for sign, img in todo:
        k = _key(relation, img)
        if sign == "+":
            if k not in have:
                have[k] = img
        else:
            have.pop(k, None)


def q7_answer(
    sql: str,
    present: dict[str, dict[Any, dict[str, Any]]],
    rows: dict[str, list[dict[str, Any]]],
    schemas: dict[str, pa.Schema],
) -> Any:
    """DuckDB's answer over the present rows (JSON images turned back into typed rows)."""
    con = duckdb.connect()
    for rel in RELATIONS:
        template = rows[rel][0]
        cols = list(template)
        typed = []
        for img in present[rel].values():
            r = {}
            for c in cols:
                v, t = img[c], template[c]
                if isinstance(t, dt.date) and isinstance(v, int):
                    v = _EPOCH + dt.timedelta(days=v)
                elif isinstance(t, decimal.Decimal) and v is not None:
                    v = decimal.Decimal(str(v))
                r[c] = v
            typed.append(r)
        con.register(rel, pa.Table.from_pylist(typed, schema=schemas[rel]))
    out = con.execute(sql).fetchall()
    con.close()
    return canon(out)


def build_case(data_dir: Path, orders: int = 500, seed: int = 7) -> Q7Case:
    """The change streams of one run (see the module doc)."""
    data = tpch_data(0.01, data_dir)
    sql, pair = q7_sql(data)
    rng = np.random.default_rng(seed)
    nation = data["nation"]
    pair_keys = [
        k for k, n in zip(nation["n_nationkey"].to_pylist(), nation["n_name"].to_pylist(), strict=True) if n in pair
    ]
    cust = data["customer"].filter(pa.compute.is_in(data["customer"]["c_nationkey"], pa.array(pair_keys, pa.int32())))
    ords = data["orders"].filter(pa.compute.is_in(data["orders"]["o_custkey"], cust["c_custkey"]))
    ords = ords.take(pa.array(np.sort(rng.choice(ords.num_rows, min(orders, ords.num_rows), replace=False))))
    lines = data["lineitem"].filter(pa.compute.is_in(data["lineitem"]["l_orderkey"], ords["o_orderkey"]))
    cust = cust.filter(pa.compute.is_in(cust["c_custkey"], ords["o_custkey"]))
    tables = {"lineitem": lines, "orders": ords, "customer": cust, "supplier": data["supplier"], "nation": nation}
    rows = {r: t.to_pylist() for r, t in tables.items()}
    case = Q7Case(sql, rows, {r: t.schema for r, t in tables.items()})
    # the load: every row inserted once, relations interleaved at random (children before parents)
    events = [(r, i) for r in RELATIONS for i in range(len(rows[r]))]
    for j in rng.permutation(len(events)):
        r, i = events[j]
        case.add(r, envelope("c" if r != "nation" else "r", None, rows[r][i]))
    _changes(case, rows, rng, pair_keys)
    return case


def _changes(case: Q7Case, rows: dict[str, list[dict[str, Any]]], rng: np.random.Generator, pair: list[int]) -> None:
    lines, ords, custs = rows["lineitem"], rows["orders"], rows["customer"]
    for i in rng.choice(len(lines), len(lines) // 10, replace=False):  # price and discount updates
        old = lines[int(i)]
        new = {**old, "l_extendedprice": old["l_extendedprice"] + 1, "l_discount": decimal.Decimal("0.01")}
        case.add("lineitem", envelope("u", old, new))
        lines[int(i)] = new
    gone = set()
    for n, i in enumerate(rng.choice(len(ords), len(ords) // 20, replace=False)):  # cancelled orders
        o = ords[int(i)]
        gone.add(o["o_orderkey"])
        if n % 2 == 0:  # with their lines, deleted first
            for li in lines:
                if li["l_orderkey"] == o["o_orderkey"]:
                    case.add("lineitem", envelope("d", li, None))
        case.add("orders", envelope("d", o, None))
        case.add("orders", None)  # a tombstone after the delete
    for i in rng.choice(len(custs), max(2, len(custs) // 10), replace=False):  # customers moving nation
        old = custs[int(i)]
        other = pair[0] if old["c_nationkey"] != pair[0] else pair[1]
        new = {**old, "c_nationkey": other}
        case.add("customer", envelope("u", old, new))
        custs[int(i)] = new
    kept = [li for li in lines if li["l_orderkey"] not in gone]
    for i in rng.choice(len(kept), len(kept) // 20, replace=False):  # lines deleted and inserted again
        case.add("lineitem", envelope("d", kept[int(i)], None))
        case.add("lineitem", envelope("c", None, kept[int(i)]))
    # bad records
    case.add("orders", envelope("d", {**ords[0], "o_orderkey": 99_999_999}, None))  # delete of a missing key
    case.add("supplier", envelope("c", None, rows["supplier"][0]))  # a second insert of a present key
    case.add("lineitem", b'{"payload": {"op": "c", "after": {"l_orderkey": ')  # truncated JSON
    case.add("customer", envelope("u", None, custs[0]))  # an update without its before image
    case.add("nation", envelope("c", None, {**rows["nation"][0], "n_nationkey": "x"}))  # text in an integer
    case.bad = 5


def split(records: list[bytes | None], parts: int) -> Iterable[list[bytes | None]]:
    """``records`` in ``parts`` consecutive chunks."""
    bounds = np.linspace(0, len(records), parts + 1).astype(int)
    for lo, hi in itertools.pairwise(bounds):
        yield records[lo:hi]


# ---------------------------------------------------------------- landed files, the SQLite job
def land(case: Q7Case, root: Path, files: int = 3) -> None:
    """Each relation's records as ``files`` JSON-lines files, oldest first (tombstones have no line)."""
    for rel in RELATIONS:
        d = root / "landing" / rel
        d.mkdir(parents=True)
        for i, chunk in enumerate(split(case.records[rel], files)):
            f = d / f"part-{i:03d}.json"
            f.write_bytes(b"\n".join(m for m in chunk if m is not None) + b"\n")
            os.utime(f, (1_700_000_000 + i * 10, 1_700_000_000 + i * 10))


def files_job(root: Path, **extra: Any) -> dict[str, Any]:
    db = f"sqlite:///{root / 'warehouse.db'}"
    return {
        "name": "q7-files",
        "query": {"sql": sql_text(root), "ddl_file": str(EXAMPLES / "tpch_schema.sql")},
        "sources": {
            r: {"kind": "files", "path": str(root / "landing" / r), "max_files_per_trigger": 1} for r in RELATIONS
        },
        "target": {
            "result": {"kind": "database", "url": db, "table": "q7_live"},
            "deltas": {"kind": "parquet", "path": str(root / "deltas")},
            "dead_letter": {"kind": "database", "url": db, "table": "q7_dead"},
        },
        "checkpoint": str(root / "ck"),
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}},
        **extra,
    }


def sql_text(root: Path) -> str:
    return (root / "q7.sql").read_text()


def sqlite_result(root: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(root / "warehouse.db") as con:
        rows = con.execute("SELECT supp_nation, cust_nation, l_year, revenue FROM q7_live").fetchall()
    return canon([(a, b, y, decimal.Decimal(f"{v:.4f}")) for a, b, y, v in rows])


def folded(deltas: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    answer: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for b in sorted({r["ssbj_batch_id"] for r in deltas}):
        rows = [r for r in deltas if r["ssbj_batch_id"] == b]
        for r in rows:
            if r["_op"] == "-":
                del answer[tuple(r[k] for k in DELTA_KEY)]
        for r in rows:
            if r["_op"] == "+":
                k = tuple(r[c] for c in DELTA_KEY)
                assert k not in answer, f"batch {b} adds {k} twice"
                answer[k] = (*k, r["revenue"])
    return canon(list(answer.values()))


def check_files_run(case: Q7Case, root: Path) -> None:
    want = case.expected()
    assert len(want) >= 2
    assert sqlite_result(root) == want
    assert folded(ds.dataset(root / "deltas", format="parquet").to_table().to_pylist()) == want
    with sqlite3.connect(root / "warehouse.db") as con:
        positions = [p for (p,) in con.execute("SELECT position FROM q7_dead")]
    assert len(positions) == case.bad
    assert all("/landing/" in p and p.rsplit(":", 1)[1].isdigit() for p in positions)
