"""Debezium envelopes decode to changes the engine applies; bad events are dead-lettered."""

from __future__ import annotations

import datetime as dt
import decimal
import json

from ssbj.cq.debezium import decode
from ssbj.cq.maintainer import ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema

DDL = """
create table n (nk integer primary key, nname varchar(10));
create table c (ck integer primary key, nk integer not null references n(nk), since date, bal decimal(8,2));
"""
SQL = "select nname, count(*) as customers, sum(bal) as balance from c, n where c.nk = n.nk group by nname"


def _event(op: str, before: dict | None, after: dict | None, envelope: bool = True) -> str:
    payload = {"op": op, "before": before, "after": after, "source": {"table": "c"}}
    return json.dumps({"schema": {}, "payload": payload} if envelope else payload)


def test_debezium_events_maintain_the_answer() -> None:
    schema = parse_schema(DDL)
    cq = ContinuousQuery(plan_query(SQL, schema))
    nations = [_event("r", None, {"nk": 1, "nname": "FRANCE"}), _event("r", None, {"nk": 2, "nname": "GERMANY"})]
    ann = {"ck": 7, "nk": 1, "since": 19000, "bal": "10.50"}
    moved = dict(ann, nk=2, bal="11.25")
    customers = [
        _event("c", None, ann),
        _event("c", None, {"ck": 8, "nk": 1, "since": "2021-01-02", "bal": 3.1}, envelope=False),
        None,  # a tombstone
        _event("u", ann, moved),  # ann moves to GERMANY
        _event("d", {"ck": 8, "nk": None, "since": None, "bal": None}, None),  # key-only before image
        _event("u", None, moved),  # no before image: cannot be applied
        _event("t", None, None),  # truncate: not a row change
        "{not json",
    ]
    n_tab, n_dead, seq = decode(nations, schema["n"], "n", 0)
    c_tab, c_dead, seq = decode(customers, schema["c"], "c", seq)
    assert not n_dead and seq == 2 + 5
    assert [d.position for d in c_dead] == [5, 6, 7]
    assert "before image" in c_dead[0].reason and "op 't'" in c_dead[1].reason
    assert c_tab.column("_op").to_pylist() == ["+", "+", "-", "+", "-"]
    assert c_tab.column("since")[1].as_py() == dt.date(2021, 1, 2)
    delta = cq.apply({"n": n_tab, "c": c_tab})
    assert not delta.dead
    assert cq.result().to_pylist() == [{"nname": "GERMANY", "customers": 1, "balance": decimal.Decimal("11.25")}]
