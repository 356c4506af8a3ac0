"""One decode for jobs on several keys gives each job what the single-job decoder gives it alone."""

from __future__ import annotations

import io
import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ssbj.pipeline.multidecode import decode_files_keys, decode_kafka_keys
from ssbj.pipeline.records import decode_files, decode_kafka

SCHEMA = pa.schema([("id", pa.int64()), ("a", pa.int64()), ("b", pa.string()), ("x", pa.float64())])
KEYS = ["a", "b"]


def _records() -> list[bytes]:
    recs: list[bytes] = []
    for i in range(60):
        r: dict[str, object] = {"id": i, "a": i % 7, "b": f"k{i % 5}", "x": i / 2}
        if i % 6 == 1:
            del r["a"]
        if i % 9 == 2:
            del r["b"]
        if i % 10 == 3:
            r["a"] = None
        if i % 11 == 4:
            r["x"] = "not a number"
        recs.append(json.dumps(r).encode())
    recs += [b"{broken", b"[1, 2]", b"", b'{"id": 99, "a": 1,\n "b": "k1", "x": 1.0}']
    return recs


def _same(shared_rows: pa.Table, shared_dead: pa.Table, alone_rows: pa.Table, alone_dead: pa.Table) -> None:
    assert shared_rows.equals(alone_rows)
    assert sorted(shared_dead.column("position").to_pylist()) == sorted(alone_dead.column("position").to_pylist())


def test_kafka_records_decoded_once_per_key_set() -> None:
    values = _records()
    n = len(values)
    raw = pa.table(
        {
            "value": pa.array(values, pa.binary()),
            "topic": ["t"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
        }
    )
    shared = decode_kafka_keys(raw, SCHEMA, KEYS)
    for k in KEYS:
        alone = decode_kafka(raw, SCHEMA, k)
        got = shared.for_key(k)
        _same(got.rows, got.dead, alone.rows, alone.dead)
        reasons = Counter(r.split(":")[0] for r in got.dead.column("reason").to_pylist())
        assert reasons[f"missing key field {k!r}"] > 0


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_landed_files_decoded_once_per_key_set(fmt: str) -> None:
    files: dict[str, bytes] = {}
    if fmt == "jsonl":
        files["f1.jsonl"] = b"\n".join(_records()[:40])
        files["f2.jsonl"] = b"\n".join(_records()[40:])
    elif fmt == "csv":
        files["f1.csv"] = b"id,a,b,x\n1,2,k1,0.5\n2,,k2,1.5\n3,x,k3,2\n4,4,,3\n"
        files["f2.csv"] = b"id,b,x\n5,k5,1\n6,k6,oops\n"  # no column a: every line a dead letter of a only
        files["f3.csv"] = b"id,x\n7,1\n"  # neither key
    else:
        for name, t in (
            ("f1.parquet", pa.table({"id": [1, 2], "a": [1, None], "b": ["k", "j"], "x": [0.1, 0.2]})),
            ("f2.parquet", pa.table({"id": [3], "b": ["k"], "x": [0.3]})),  # no a
            ("f3.parquet", pa.table({"id": [4]})),
        ):
            buf = io.BytesIO()
            pq.write_table(t, buf)
            files[name] = buf.getvalue()
        files["f4.parquet"] = b"not parquet"
    raw = pa.table({"path": list(files), "content": pa.array(list(files.values()), pa.binary())})
    shared = decode_files_keys(raw, fmt, SCHEMA, KEYS)
    for k in KEYS:
        alone = decode_files(raw, fmt, SCHEMA, k)
        got = shared.for_key(k)
        _same(got.rows, got.dead, alone.rows, alone.dead)
