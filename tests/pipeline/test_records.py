"""Decoding raw records: good ones in order, every bad one a dead letter with its position."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from ssbj.contracts import DEAD_LETTER_SCHEMA
from ssbj.pipeline.records import decode_files, decode_kafka

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("amt", pa.float64()), ("note", pa.string())])

good = st.fixed_dictionaries(
    {"id": st.integers(-(2**62), 2**62), "k": st.one_of(st.none(), st.integers(0, 50))},
    optional={
        "amt": st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)),
        "note": st.text(max_size=8),
        "extra": st.integers(),
    },
)
bad = st.sampled_from(
    [
        b'{"id": 1, "k": ',
        b'{"id": "one", "k": 1}',
        b'{"id": 2}',
        b'{"id": 3, "k": "seven"}',
        b"[1, 2]",
        b"42",
        b"",
        b'{"id": 4, "k": 1.5}',
    ]
)
record = st.one_of(good.map(lambda d: ("good", d)), bad.map(lambda b: ("bad", b)))


def _kafka(values: list[bytes]) -> pa.Table:
    n = len(values)
    return pa.table(
        {
            "value": pa.array(values, pa.binary()),
            "topic": ["orders"] * n,
            "partition": pa.array([i % 3 for i in range(n)], pa.int32()),
            "offset": pa.array(range(100, 100 + n), pa.int64()),
        }
    )


def _expected_row(d: dict[str, Any]) -> dict[str, Any]:
    return {"id": d["id"], "k": d["k"], "amt": d.get("amt"), "note": d.get("note")}


@settings(max_examples=150, deadline=None)
@given(st.lists(record, max_size=60), st.booleans())
def test_kafka_records_decode_exactly(records: list[tuple[str, Any]], pretty: bool) -> None:
    values = [(json.dumps(r, indent=1 if pretty else None).encode() if kind == "good" else r) for kind, r in records]
    d = decode_kafka(_kafka(values), SCHEMA, "k")
    assert d.rows.schema == SCHEMA and d.dead.schema == DEAD_LETTER_SCHEMA
    assert d.rows.to_pylist() == [_expected_row(r) for kind, r in records if kind == "good"]
    bad_idx = [i for i, (kind, _) in enumerate(records) if kind == "bad"]
    assert d.dead.column("offset").to_pylist() == [100 + i for i in bad_idx]
    assert d.dead.column("position").to_pylist() == [f"orders/{i % 3}/{100 + i}" for i in bad_idx]
    assert all(d.dead.column("reason").to_pylist())
    assert d.rows.num_rows + d.dead.num_rows == len(records)


def test_missing_key_field_is_a_dead_letter_but_null_key_is_a_row() -> None:
    d = decode_kafka(_kafka([b'{"id": 1}', b'{"id": 2, "k": null}']), SCHEMA, "k")
    assert d.rows.to_pylist() == [{"id": 2, "k": None, "amt": None, "note": None}]
    assert d.dead.column("reason").to_pylist() == ["missing key field 'k'"]


def test_files_keep_file_and_line() -> None:
    jsonl = b'{"id": 1, "k": 2}\n\n{"id": 2, "k": "x"}\r\n{"id": 3, "k": 4}\n'
    csv = b"id,k,amt,note\n1,2,0.5,a\n2,x,1,b\n3,,2,c\n4,5\n"
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [1, 2], "k": pa.array([3, None], pa.int64()), "other": ["x", "y"]}), buf)
    raw = pa.table({"path": ["b.jsonl"], "content": pa.array([jsonl], pa.binary())})
    d = decode_files(raw, "jsonl", SCHEMA, "k")
    assert d.rows.column("id").to_pylist() == [1, 3]
    assert d.dead.column("position").to_pylist() == ["b.jsonl:3"]
    raw = pa.table({"path": ["c.csv"], "content": pa.array([csv], pa.binary())})
    d = decode_files(raw, "csv", SCHEMA, "k")
    assert d.rows.to_pylist() == [
        {"id": 1, "k": 2, "amt": 0.5, "note": "a"},
        {"id": 3, "k": None, "amt": 2.0, "note": "c"},
    ]
    assert d.dead.column("line").to_pylist() == [3, 5]
    raw = pa.table({"path": ["z.parquet", "a.parquet"], "content": pa.array([b"junk", buf.getvalue()], pa.binary())})
    d = decode_files(raw, "parquet", SCHEMA, "k")
    assert d.rows.column("id").to_pylist() == [1, 2]
    assert d.dead.column("position").to_pylist() == ["z.parquet"]
    assert "Parquet" in d.dead.column("reason")[0].as_py()


def test_csv_without_the_key_column_dead_letters_every_line() -> None:
    raw = pa.table({"path": ["c.csv"], "content": pa.array([b"id,amt\n1,2\n3,4\n"], pa.binary())})
    d = decode_files(raw, "csv", SCHEMA, "k")
    assert d.rows.num_rows == 0
    assert d.dead.column("line").to_pylist() == [2, 3]
    assert set(d.dead.column("reason").to_pylist()) == {"missing key column 'k' in the CSV header"}
