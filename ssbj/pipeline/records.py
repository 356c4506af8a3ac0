"""Decode raw source records (Kafka messages, landed files) into typed stream rows.

A record that cannot be decoded (bad JSON or CSV, a missing key field, a value of the
wrong type) becomes a dead letter with its reason and source position; the rest are
decoded in bulk with pyarrow.  Finding the bad records bisects the failing range, so a
batch with a few bad records costs O(bad · log n) bulk parses, not one parse per record.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.json as pjson
import pyarrow.parquet as pq

from ssbj.config import JobConfig
from ssbj.contracts import DEAD_LETTER_SCHEMA

_MAX_PAYLOAD = 64 << 10  # bytes of a bad record kept in its dead letter


SOURCE_POSITION_SCHEMA = pa.schema([f for f in DEAD_LETTER_SCHEMA if f.name not in ("reason", "payload")])
"""Where a decoded row came from (the dead-letter columns that locate a record)."""


@dataclass
class Decoded:
    """Typed rows, in source order, and the dead letters of one batch.

    ``sources`` (when asked for): one row per decoded row, where its record is
    (:data:`SOURCE_POSITION_SCHEMA`), for dead letters found after decoding (late rows).
    """

    rows: pa.Table
    dead: pa.Table
    sources: pa.Table | None = None


@dataclass
class _Bad:
    index: int
    reason: str


_NOISE = re.compile(r"( in row \d+$|Row #\d+: )")


def _one_line(exc: BaseException) -> str:
    """Return the error text on one line, without pyarrow's row numbers inside the parsed range."""
    return _NOISE.sub("", " ".join(str(exc).split()))[:500]


def _bisect(n: int, parse: Callable[[int, int], pa.Table]) -> tuple[list[pa.Table], list[_Bad]]:
    """Parse records [0, n) in ranges; a failing range is split until the bad records are alone."""
    good: list[tuple[int, pa.Table]] = []
    bad: list[_Bad] = []
    stack = [(0, n)]
    while stack:
        lo, hi = stack.pop()
        if lo >= hi:
            continue
        try:
            good.append((lo, parse(lo, hi)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError) as exc:
            if hi - lo == 1:
                bad.append(_Bad(lo, _one_line(exc)))
            else:
                mid = (lo + hi) // 2
                stack.append((mid, hi))
                stack.append((lo, mid))
    good.sort(key=lambda t: t[0])
    bad.sort(key=lambda b: b.index)
    return [t for _, t in good], bad


def _normalise_json(values: Sequence[bytes | None]) -> tuple[list[bytes], dict[int, str]]:
    """One JSON text per line: re-encode records that span lines; flag empty ones."""
    out: list[bytes] = []
    pre_bad: dict[int, str] = {}
    for i, v in enumerate(values):
        if v is None or not v.strip():
            pre_bad[i] = "empty record"
            out.append(b"{}")
        elif b"\n" in v or b"\r" in v:
            try:
                out.append(json.dumps(json.loads(v)).encode())
            except (ValueError, UnicodeDecodeError) as exc:
                pre_bad[i] = f"bad JSON: {_one_line(exc)}"
                out.append(b"{}")
        else:
            out.append(v)
    return out, pre_bad


def parse_json_lines(
    values: Sequence[bytes | None], schema: pa.Schema
) -> tuple[pa.Table, list[_Bad], list[int], list[bytes]]:
    """Parse JSON objects: the good rows (in order), the bad records, each row's record index, the lines."""
    lines, pre_bad = _normalise_json(values)
    opts = pjson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    block = max(1 << 20, 2 * max((len(x) for x in lines), default=0) + 16)
    ropts = pjson.ReadOptions(block_size=block, use_threads=False)

    def parse(lo: int, hi: int) -> pa.Table:
        bad_here = [i for i in range(lo, hi) if i in pre_bad]
        if bad_here:
            raise ValueError(pre_bad[bad_here[0]])
        data = b"\n".join(lines[lo:hi]) + b"\n"
        t = pjson.read_json(io.BytesIO(data), read_options=ropts, parse_options=opts)
        if t.num_rows != hi - lo:
            raise ValueError(f"expected one JSON object per record, found {t.num_rows} in {hi - lo}")
        return t.select(schema.names).cast(schema)

    tables, bad = _bisect(len(lines), parse)
    rows = pa.concat_tables(tables) if tables else schema.empty_table()
    return rows, bad, _good_indexes(len(lines), bad), lines


def json_keys(
    values: Sequence[bytes | None], schema: pa.Schema, keys: Sequence[str]
) -> tuple[pa.Table, list[_Bad], list[int], dict[str, list[int]]]:
    """Rows, bad records, the record index of each row, and per key the rows whose key field is missing."""
    rows, bad, good_idx, lines = parse_json_lines(values, schema)
    nulls = np.zeros(rows.num_rows, dtype=bool)
    for k in keys:
        nulls |= rows.column(k).is_null().to_numpy(zero_copy_only=False)
    drop: set[int] = set()
    absent: dict[int, list[str]] = {}
    for pos in nulls.nonzero()[0]:
        i = good_idx[int(pos)]
        try:
            obj = json.loads(lines[i])
        except ValueError:
            obj = {}
        if not isinstance(obj, dict):
            bad.append(_Bad(i, "record is not a JSON object"))
            drop.add(int(pos))
        else:
            absent[int(pos)] = [k for k in keys if k not in obj]
    keep = [p for p in range(rows.num_rows) if p not in drop]
    if drop:
        rows = rows.take(pa.array(keep, pa.int64()))
    new_pos = {p: n for n, p in enumerate(keep)}
    missing: dict[str, list[int]] = {k: [] for k in keys}
    for at, ks in absent.items():
        for k in ks:
            missing[k].append(new_pos[at])
    bad.sort(key=lambda b: b.index)
    return rows, bad, [good_idx[p] for p in keep], missing


def decode_json(values: Sequence[bytes | None], schema: pa.Schema, key: str) -> tuple[pa.Table, list[_Bad]]:
    """Decode JSON objects; returns the good rows (in order) and the bad record indexes.

    A NULL key is a key that never matches; a *missing* key field is a malformed record.
    """
    rows, bad, index, missing = json_keys(values, schema, [key])
    if missing[key]:
        bad += [_Bad(index[p], f"missing key field {key!r}") for p in missing[key]]
        gone = set(missing[key])
        rows = rows.take(pa.array([p for p in range(rows.num_rows) if p not in gone], pa.int64()))
        bad.sort(key=lambda b: b.index)
    return rows, bad


def _good_indexes(n: int, bad: list[_Bad]) -> list[int]:
    skip = {b.index for b in bad}
    return [i for i in range(n) if i not in skip]


def decode_csv_lines(
    lines: Sequence[bytes], header: bytes | None, schema: pa.Schema, key: str, delimiter: str
) -> tuple[pa.Table, list[_Bad]]:
    """Decode CSV data lines (one record per line) with the file's header line."""
    if header is not None:
        cols = [c.strip() for c in header.decode("utf-8", "replace").split(delimiter)]
        if key not in cols:
            return schema.empty_table(), [
                _Bad(i, f"missing key column {key!r} in the CSV header") for i in range(len(lines))
            ]
    else:
        cols = list(schema.names)
    types = {n: schema.field(n).type for n in schema.names if n in cols}
    conv = pcsv.ConvertOptions(
        column_types=types,
        include_columns=list(schema.names),  # a column missing from the file is NULL, as in JSON
        include_missing_columns=True,
        strings_can_be_null=False,
    )
    popts = pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=False)
    ropts = pcsv.ReadOptions(column_names=cols, use_threads=False, block_size=1 << 24)

    def parse(lo: int, hi: int) -> pa.Table:
        data = b"\n".join(lines[lo:hi]) + b"\n"
        t = pcsv.read_csv(io.BytesIO(data), read_options=ropts, parse_options=popts, convert_options=conv)
        if t.num_rows != hi - lo:
            raise ValueError(f"expected one CSV record per line, found {t.num_rows} in {hi - lo}")
        return t.select(schema.names).cast(schema)

    tables, bad = _bisect(len(lines), parse)
    return (pa.concat_tables(tables) if tables else schema.empty_table()), bad


def decode_parquet(content: bytes, schema: pa.Schema, key: str) -> tuple[pa.Table, list[_Bad], int]:
    """Decode a Parquet file; returns rows, bad rows, and the number of records read."""
    table = pq.read_table(pa.BufferReader(content))
    if key not in table.column_names:
        raise ValueError(f"missing key column {key!r} in the Parquet file (columns: {', '.join(table.column_names)})")
    cols = []
    for f in schema:
        cols.append(table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type))
    src = pa.Table.from_arrays(cols, names=schema.names)

    def parse(lo: int, hi: int) -> pa.Table:
        return src.slice(lo, hi - lo).cast(schema)

    tables, bad = _bisect(src.num_rows, parse)
    return (pa.concat_tables(tables) if tables else schema.empty_table()), bad, src.num_rows


class _DeadLetters:
    def __init__(self) -> None:
        self.cols: dict[str, list[Any]] = {n: [] for n in DEAD_LETTER_SCHEMA.names}

    def add(self, reason: str, position: str, payload: bytes | None, **where: Any) -> None:
        for n in DEAD_LETTER_SCHEMA.names:
            if n == "reason":
                self.cols[n].append(reason)
            elif n == "position":
                self.cols[n].append(position)
            elif n == "payload":
                self.cols[n].append(payload[:_MAX_PAYLOAD] if payload is not None else None)
            else:
                self.cols[n].append(where.get(n))

    def table(self) -> pa.Table:
        return pa.table(self.cols, schema=DEAD_LETTER_SCHEMA)


def _positions(cols: dict[str, list[Any]]) -> pa.Table:
    return pa.table(
        {n: cols.get(n, [None] * len(cols["position"])) for n in SOURCE_POSITION_SCHEMA.names},
        schema=SOURCE_POSITION_SCHEMA,
    )


def decode_kafka(raw: pa.Table, schema: pa.Schema, key: str, positions: bool = False) -> Decoded:
    """Decode Kafka messages (columns value, topic, partition, offset) whose values are JSON objects."""
    values = raw.column("value").to_pylist()
    rows, bad = decode_json(values, schema, key)
    dl = _DeadLetters()
    sources = None
    if bad or positions:
        topics = raw.column("topic").to_pylist()
        parts = raw.column("partition").to_pylist()
        offsets = raw.column("offset").to_pylist()
        for b in bad:
            t, p, o = topics[b.index], parts[b.index], offsets[b.index]
            dl.add(b.reason, f"{t}/{p}/{o}", values[b.index], topic=t, partition=p, offset=o)
        if positions:
            good = _good_indexes(len(values), bad)
            sources = _positions(
                {
                    "position": [f"{topics[i]}/{parts[i]}/{offsets[i]}" for i in good],
                    "topic": [topics[i] for i in good],
                    "partition": [parts[i] for i in good],
                    "offset": [offsets[i] for i in good],
                }
            )
    return Decoded(rows, dl.table(), sources)


def landed_files(raw: pa.Table) -> Iterator[tuple[str, bytes]]:
    """Yield (path, content) of landed files (columns path, content) in path order."""
    paths = raw.column("path").to_pylist()
    contents = raw.column("content").to_pylist()
    for i in sorted(range(len(paths)), key=lambda i: paths[i]):
        yield paths[i], contents[i] or b""


def file_lines(content: bytes, header: bool) -> tuple[list[bytes], list[int], bytes | None]:
    """Split a text file into its non-blank data lines, their 1-based line numbers and the header line."""
    lines = content.split(b"\n")
    numbers = list(range(1, len(lines) + 1))
    hdr: bytes | None = None
    if header:
        while lines and not lines[0].strip():
            lines, numbers = lines[1:], numbers[1:]
        if lines:
            hdr = lines[0].rstrip(b"\r")
            lines, numbers = lines[1:], numbers[1:]
    keep = [j for j, ln in enumerate(lines) if ln.strip()]
    return [lines[j].rstrip(b"\r") for j in keep], [numbers[j] for j in keep], hdr


def decode_files(
    raw: pa.Table,
    fmt: str,
    schema: pa.Schema,
    key: str,
    delimiter: str = ",",
    header: bool = True,
    positions: bool = False,
) -> Decoded:
    """Decode landed files (columns path, content) in path order: jsonl, csv or parquet."""
    out: list[pa.Table] = []
    dl = _DeadLetters()
    where: dict[str, list[Any]] = {"position": [], "file": [], "line": []}
    for path, content in landed_files(raw):
        if fmt == "parquet":
            try:
                rows, bad, n = decode_parquet(content, schema, key)
            except (pa.ArrowInvalid, ValueError, OSError) as exc:
                dl.add(f"unreadable Parquet file: {_one_line(exc)}", path, None, file=path)
                continue
            for b in bad:
                dl.add(b.reason, f"{path}:row {b.index + 1}", None, file=path, line=b.index + 1)
            out.append(rows)
            if positions:
                for i in _good_indexes(n, bad):
                    where["position"].append(f"{path}:row {i + 1}")
                    where["file"].append(path)
                    where["line"].append(i + 1)
            continue
        lines, numbers, hdr = file_lines(content, fmt == "csv" and header)
        if fmt == "jsonl":
            rows, bad = decode_json(lines, schema, key)
        else:
            rows, bad = decode_csv_lines(lines, hdr, schema, key, delimiter)
        for b in bad:
            dl.add(b.reason, f"{path}:{numbers[b.index]}", lines[b.index], file=path, line=numbers[b.index])
        out.append(rows)
        if positions:
            good = _good_indexes(len(lines), bad) if rows.num_rows else []
            for i in good:
                where["position"].append(f"{path}:{numbers[i]}")
                where["file"].append(path)
                where["line"].append(numbers[i])
    rows_all = pa.concat_tables(out) if out else schema.empty_table()
    return Decoded(rows_all, dl.table(), _positions(where) if positions else None)


def decoder(cfg: JobConfig) -> Callable[[pa.Table], Decoded]:
    """Return the decoder of raw records of the configured source (typed rows, dead letters)."""
    schema, key = cfg.stream_schema, cfg.join.stream_key
    src = cfg.source
    if src.kind == "files":
        fmt, delim, header = src.format, src.csv_delimiter, src.csv_header
        return lambda raw: decode_files(raw, fmt, schema, key, delim, header)
    return lambda raw: decode_kafka(raw, schema, key)
