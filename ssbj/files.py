"""Parquet and CSV input files of the file commands (``ssbj join``, ``ssbj plan``, ``ssbj query``).

One set of rules: format by extension, an InputError naming the role and the file, a CSV
read whole where its types need all rows, the stream regrouped into fixed-size batches.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ssbj.errors import ConfigError, InputError, ServiceError

__all__ = [
    "check_key_column",
    "check_output",
    "file_format",
    "master_schema",
    "open_stream",
    "read_error",
    "read_master",
    "read_schema",
    "read_table",
    "rebatch",
    "stream_batches",
    "write_parquet_atomically",
]

CSV_BLOCK_BYTES = 64 << 20  # CSV type inference looks at the first block only


def one_line(exc: BaseException) -> str:
    """Return the message of an exception on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


ROW_GROUP_ROWS = 1 << 17  # rows buffered before a Parquet row group is written


def write_parquet_atomically(tables: Iterable[pa.Table], schema: pa.Schema, out: Path, what: str = "output") -> int:
    """Stream ``tables`` into ``out`` through a temporary file renamed at the end; rows written.

    Readers never see a partial file: the rename happens only after the last row group. A
    file that cannot be opened is a configuration error; a write that fails later (disk
    full, file system gone) is a service error, and the temporary file is removed.
    """
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    rows = 0
    pending: list[pa.Table] = []
    pending_rows = 0
    try:
        try:
            writer = pq.ParquetWriter(tmp, schema)
        except (pa.ArrowException, OSError) as exc:
            raise ConfigError(f"cannot write {what} {out}: {one_line(exc)}") from exc
        with writer:
            for t in tables:
                if t.num_rows:
                    pending.append(t)
                    pending_rows += t.num_rows
                if pending_rows >= ROW_GROUP_ROWS:
                    writer.write_table(pa.concat_tables(pending))
                    rows += pending_rows
                    pending, pending_rows = [], 0
            if pending:
                writer.write_table(pa.concat_tables(pending))
                rows += pending_rows
        os.replace(tmp, out)
    except OSError as exc:  # the file opened, then the disk or file system failed
        raise ServiceError(f"cannot write {what} {out}: {one_line(exc)}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return rows


def file_format(path: Path, role: str) -> str:
    """``parquet`` or ``csv`` by extension; checks that the file exists and is readable."""
    if not path.exists():
        raise InputError(f"{role} file not found: {path}")
    if not path.is_file():
        raise InputError(f"{role} file {path} is not a regular file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{role} file {path} is not readable (permission denied)")
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz")):
        return "csv"
    raise InputError(f"{role} file {path} has an unsupported file type (expected .parquet, .pq, .csv or .csv.gz)")


def read_error(role: str, path: Path, fmt: str, exc: BaseException) -> InputError:
    """InputError for a file that exists but cannot be read in its format."""
    kind = "Parquet" if fmt == "parquet" else "CSV"
    return InputError(f"cannot read {role} file {path} as {kind}: {one_line(exc)}")


def read_schema(path: Path, role: str) -> pa.Schema:
    """Read the schema of a Parquet or CSV file (a CSV file is read to infer it)."""
    fmt = file_format(path, role)
    try:
        if fmt == "parquet":
            return pq.read_schema(path).remove_metadata()
        return pacsv.read_csv(path).schema
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise read_error(role, path, fmt, exc) from exc


def read_table(path: Path, role: str, columns: Iterable[str]) -> pa.Table:
    """Read the file's rows restricted to ``columns`` (in that order)."""
    fmt = file_format(path, role)
    cols = list(columns)
    try:
        table = pq.read_table(path, columns=cols) if fmt == "parquet" else pacsv.read_csv(path)
        return table.select(cols).replace_schema_metadata(None)
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        raise read_error(role, path, fmt, exc) from exc


def rebatch(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """Regroup record batches into tables of exactly ``rows`` rows (the last may be shorter)."""
    pending: list[pa.RecordBatch] = []
    n = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        n += batch.num_rows
        while n >= rows:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, rows)
            rest = table.slice(rows)
            pending, n = rest.to_batches(), rest.num_rows
    if n:
        yield pa.Table.from_batches(pending)


def _guarded(batches: Iterable[pa.RecordBatch], path: Path, fmt: str) -> Iterator[pa.RecordBatch]:
    """Re-raise read errors that happen mid-file as InputError."""
    try:
        yield from batches
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        raise read_error("stream", path, fmt, exc) from exc


def stream_batches(
    path: Path, batch_rows: int, columns: Iterable[str] | None = None
) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """Return the stream file's schema and its rows as tables of ``batch_rows`` rows (``columns`` only)."""
    fmt = file_format(path, "stream")
    cols = list(columns) if columns is not None else None
    try:
        if fmt == "parquet":
            pf = pq.ParquetFile(path)
            schema = pf.schema_arrow
            raw: Iterable[pa.RecordBatch] = pf.iter_batches(batch_size=batch_rows, columns=cols)
        else:
            reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES))
            schema = reader.schema
            raw = reader if cols is None else (b.select(cols) for b in reader)
        if cols is not None:
            schema = pa.schema([schema.field(c) for c in cols])
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        raise read_error("stream", path, fmt, exc) from exc
    return schema, rebatch(_guarded(raw, path, fmt), batch_rows)


def open_stream(path: Path, columns: Iterable[str], batch_rows: int) -> Iterator[pa.Table]:
    """Open the stream file as tables of ``batch_rows`` rows holding ``columns``."""
    return stream_batches(path, batch_rows, columns)[1]


def master_schema(path: Path, fmt: str) -> tuple[pa.Schema, pa.Table | None]:
    """Return the master schema; a CSV master is read whole here (its types need all rows)."""
    try:
        if fmt == "parquet":
            return pq.read_schema(path), None
        table = pacsv.read_csv(path)
        return table.schema, table
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise read_error("master", path, fmt, exc) from exc


def read_master(path: Path, fmt: str, columns: list[str], table: pa.Table | None) -> pa.Table:
    """Return the master table restricted to ``columns`` (``table``: the CSV master already read)."""
    try:
        if table is None:
            table = pq.read_table(path, columns=columns)
        return table.select(columns)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise read_error("master", path, fmt, exc) from exc


def check_key_column(schema: pa.Schema, key: str, role: str, path: Path) -> None:
    """InputError naming the key and listing the columns if ``key`` is not in ``schema``."""
    if key not in schema.names:
        raise InputError(
            f"{role} key column {key!r} not found in {role} file {path}; "
            f"available columns: {', '.join(schema.names) or '(none)'}"
        )


def check_output(out: Path, inputs: Iterable[Path]) -> None:
    """Check that the output goes to an existing directory and overwrites no input."""
    parent = out.parent if str(out.parent) else Path()
    if not parent.is_dir():
        raise ConfigError(f"output directory {parent} does not exist")
    if out.is_dir():
        raise ConfigError(f"output {out} is a directory")
    for p in inputs:
        if out.resolve() == p.resolve():
            raise ConfigError(f"output {out} would overwrite input file {p}")
