"""``ssbj explain`` and ``ssbj query``: the SQL front end on the command line.

``explain`` prints a query's binary plan and the plan after TSC (and, when the inputs'
files are given and the query is in the supported subset, the multi-way operator's join
tree). ``query`` compiles a SELECT over named stream and master files into a
:class:`MultiWaySpec` and replays the stream through ``ssbj.core.multiway.run_query``,
writing the result rows to Parquet with the columns named as the SELECT names them.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ssbj.core.multiway import run_query
from ssbj.core.multiway.spec import MultiWaySpec
from ssbj.errors import ConfigError, InputError
from ssbj.files import check_output, file_format, open_stream, read_schema, read_table, write_parquet_atomically
from ssbj.sql.compile import compile_sql
from ssbj.sql.logical import parse_query
from ssbj.sql.parse import parse_schema_ddl
from ssbj.sql.plan import build_plan, render
from ssbj.sql.tsc import check_conversion, convert
from ssbj.units import parse_size

__all__ = ["add_sql_commands"]

DEFAULT_BATCH_ROWS = 100_000


def _named(values: list[str] | None, option: str, need_file: bool) -> dict[str, Path | None]:
    """``NAME=FILE`` (or a bare ``NAME`` when ``need_file`` is false) per value, names unique."""
    out: dict[str, Path | None] = {}
    for v in values or []:
        name, sep, file = v.partition("=")
        name = name.strip()
        if not name or (sep and not file) or (need_file and not sep):
            form = "NAME=FILE" if need_file else "NAME or NAME=FILE"
            raise ConfigError(f"bad {option} {v!r}: expected {form}")
        if name in out:
            raise ConfigError(f"{option} {name!r} given twice")
        out[name] = Path(file) if sep else None
    return out


def _read_sql(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"SQL file not found: {p}")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read SQL file {p}: {exc}") from exc


def _schemas(files: Mapping[str, Path | None], roles: Mapping[str, str]) -> dict[str, pa.Schema]:
    return {name: read_schema(path, roles[name]) for name, path in files.items() if path is not None}


def _cmd_explain(args: argparse.Namespace) -> int:
    """``ssbj explain``: the binary plan and the plan after TSC."""
    text = _read_sql(args.sql)
    streams = _named(args.stream, "--stream", need_file=False)
    masters = _named(args.master, "--master", need_file=True)
    both = set(streams) & set(masters)
    if both:
        raise ConfigError(f"{', '.join(sorted(both))} named both as --stream and --master")
    roles = {**{n: "stream" for n in streams}, **{n: "master" for n in masters}}
    files = _schemas({**streams, **masters}, roles)
    schema: dict[str, dict[str, str]] = parse_schema_ddl(_read_sql(args.schema)) if args.schema else {}
    schema.update({name: {f.name: str(f.type) for f in s} for name, s in files.items()})
    plan = build_plan(text, schema)
    converted = convert(plan)
    problems = check_conversion(plan, converted)
    print("Binary plan:")
    print(render(plan))
    print("\nConverted plan (TSC):")
    print(render(converted))
    verdict = "converted" if not problems else "not converted: " + "; ".join(problems)
    print(f"\nTSC: {verdict}")
    if streams and set(files) >= set(roles):
        try:
            spec = compile_sql(text, files, streams=set(streams))
        except ConfigError as exc:
            print(f"\nMulti-way operator: not supported: {exc}")
        else:
            print("\nMulti-way operator:")
            print(describe(spec))
    return 0


def describe(spec: MultiWaySpec) -> str:
    """Describe the join tree of a spec, one edge per line."""
    lines = [f"stream {spec.stream} [{', '.join(spec.stream_columns)}]"]
    w = spec.window
    if w is not None:
        keys = " AND ".join(f"{w.stream}.{k} = {spec.stream}.{p}" for k, p in zip(w.keys, w.probe_keys, strict=True))
        lines.append(
            f"  {w.kind.upper()} WINDOW stream {w.stream} ON {keys} AND {w.stream}.{w.time} BETWEEN "
            f"{spec.stream}.{w.probe_time} - {w.lower} AND {spec.stream}.{w.probe_time} + {w.upper} "
            f"(lateness {w.lateness}) [{', '.join(w.columns)}]"
        )
    for e in spec.edges:
        m = spec.master(e.master)
        keys = ", ".join(
            f"{e.probe}.{p} = {e.master}.{c}" for p, c in zip(e.probe_columns, e.master_columns, strict=True)
        )
        lines.append(f"  {e.kind.upper()} {m.table} AS {m.alias} ON {keys} [{', '.join(m.columns)}]")
    for alias, expr in spec.filters.items():
        lines.append(f"  filter {alias}: {expr}")
    lines.append(f"  output [{', '.join(f'{o.alias}.{o.column} AS {o.name}' for o in spec.output)}]")
    return "\n".join(lines)


def _output_schema(spec: MultiWaySpec, schemas: Mapping[str, pa.Schema], tables: Mapping[str, str]) -> pa.Schema:
    fields = []
    for o in spec.output:
        f = schemas[tables[o.alias]].field(o.column)
        fields.append(pa.field(o.name, f.type))
    return pa.schema(fields)


def _cmd_query(args: argparse.Namespace) -> int:
    """``ssbj query``: run a SELECT through the multi-way operator, write Parquet."""
    t_start = time.perf_counter()
    budget = parse_size(args.memory)
    if args.batch_rows < 1:
        raise ConfigError(f"--batch-rows must be >= 1, got {args.batch_rows}")
    text = _read_sql(args.sql)
    streams = _named(args.stream, "--stream", need_file=True)
    masters = _named(args.master, "--master", need_file=True)
    if len(streams) not in (1, 2):
        raise ConfigError(f"give one --stream NAME=FILE, or two joined within a window (got {len(streams)})")
    both = set(streams) & set(masters)
    if both:
        raise ConfigError(f"{', '.join(sorted(both))} named both as --stream and --master")
    paths: dict[str, Path] = {n: p for n, p in {**streams, **masters}.items() if p is not None}
    roles = {**{n: "stream" for n in streams}, **{n: "master" for n in masters}}
    for name, path in paths.items():
        file_format(path, roles[name])
    out = Path(args.out)
    check_output(out, paths.values())
    schemas = {name: read_schema(path, roles[name]) for name, path in paths.items()}
    spec = compile_sql(text, schemas, streams=set(streams), lateness=args.lateness)
    unused = sorted(set(masters) - {m.table for m in spec.masters})
    if unused:
        raise ConfigError(f"--master {', '.join(unused)} not used by the query")

    alias_of = {i_table: alias for alias, i_table in _stream_tables(spec, text, schemas, set(streams)).items()}
    needed: dict[str, list[str]] = {}
    for m in spec.masters:
        cols = needed.setdefault(m.table, [])
        cols += [c for c in m.columns if c not in cols]
    tables = {m.table: read_table(paths[m.table], "master", cols) for m in spec.masters for cols in [needed[m.table]]}
    feeds: dict[str, Iterator[pa.Table]] = {}
    for name, alias in alias_of.items():
        w = spec.window
        stream_cols = spec.stream_columns if alias == spec.stream or w is None else w.columns
        feeds[alias] = open_stream(paths[name], stream_cols, args.batch_rows)
    time_cols = (
        {} if spec.window is None else {spec.stream: spec.window.probe_time, spec.window.stream: spec.window.time}
    )
    feed = interleave(feeds, time_cols) if spec.window is not None else feeds[spec.stream]
    aliases = {**{a: n for n, a in alias_of.items()}, **{m.alias: m.table for m in spec.masters}}
    schema = _output_schema(spec, schemas, aliases)
    stats: dict[str, Any] = {}
    rows = _write(run_query(spec, feed, tables, budget, stats), schema, out)
    wall = time.perf_counter() - t_start
    if args.stats:
        report = {
            "command": "query",
            "sql": str(args.sql),
            "output": str(out),
            "rows_written": rows,
            "wall_seconds": wall,
            "memory_budget_bytes": budget,
            "stats": stats,
        }
        print(json.dumps(report, indent=2, default=str))
    else:
        late = f"; {stats['window_late']:,} late rows not joined" if spec.window is not None else ""
        print(f"ssbj query: {rows:,} rows in {out}; {wall:.2f} s{late}")
    return 0


def _stream_tables(spec: MultiWaySpec, text: str, schemas: Mapping[str, pa.Schema], names: set[str]) -> dict[str, str]:
    """Stream alias -> the name (file) it is read by."""
    q = parse_query(text, schemas)
    return {i.alias: i.table for i in q.inputs if i.alias in spec.streams and i.table in names}


def interleave(feeds: Mapping[str, Iterator[pa.Table]], time_cols: Mapping[str, str]) -> Iterator[tuple[str, pa.Table]]:
    """Batches of several streams as (alias, batch), the one with the earliest first event time first."""
    heads: dict[str, pa.Table] = {}
    for alias, it in feeds.items():
        b = next(it, None)
        if b is not None:
            heads[alias] = b

    def first_time(alias: str) -> Any:
        col = heads[alias].column(time_cols[alias])
        t = pc.min(col.cast(pa.int64()) if not pa.types.is_integer(col.type) else col).as_py()
        return (t is not None, t if t is not None else 0)

    while heads:
        alias = min(heads, key=first_time)
        yield alias, heads[alias]
        b = next(feeds[alias], None)
        if b is None:
            del heads[alias]
        else:
            heads[alias] = b


def _write(results: Iterator[pa.Table], schema: pa.Schema, out: Path) -> int:
    """Stream ``results`` into ``out`` (through a temporary file renamed at the end); rows written."""

    def checked() -> Iterator[pa.Table]:
        for t in results:
            if t.column_names != schema.names:
                raise InputError(f"the operator returned columns {t.column_names}, expected {schema.names}")
            yield t.cast(schema)

    return write_parquet_atomically(checked(), schema, out)


def add_sql_commands(sub: Any) -> None:
    """Register ``explain`` and ``query`` on the ``ssbj`` sub-command parser."""
    explain = sub.add_parser(
        "explain",
        help="print a SQL query's binary plan and the plan with multi-way join nodes (TSC)",
        description=(
            "Parse QUERY.sql, print its binary join plan and the plan after TSC, which replaces "
            "binary join trees by multi-way join nodes. Column types come from the inputs' files "
            "(--stream/--master NAME=FILE) or from CREATE TABLE statements (--schema)."
        ),
    )
    explain.add_argument("--sql", required=True, help="file holding the SELECT (views: CREATE VIEW ...; SELECT ...)")
    explain.add_argument("--stream", action="append", help="stream input: NAME or NAME=FILE (repeatable)")
    explain.add_argument("--master", action="append", help="master input: NAME=FILE (repeatable)")
    explain.add_argument("--schema", help="file of CREATE TABLE statements naming the inputs' columns")
    explain.set_defaults(handler=lambda a, _extra: _cmd_explain(a))

    query = sub.add_parser(
        "query",
        help="run a SQL SELECT over a stream file and master files with the multi-way operator",
        description=(
            "Compile QUERY.sql (inner and LEFT equi-joins, single-input filters, columns) and replay "
            "the stream file batch by batch through the multi-way operator with the master files; "
            "write the result rows to OUT (Parquet), columns named as the SELECT names them."
        ),
    )
    query.add_argument("--sql", required=True, help="file holding the SELECT")
    query.add_argument(
        "--stream",
        action="append",
        required=True,
        help="the stream: NAME=FILE (.parquet or .csv); twice for two streams joined within a window",
    )
    query.add_argument(
        "--lateness",
        type=float,
        default=0.0,
        help="allowed lateness of a window join's streams (seconds; units of an integer time column)",
    )
    query.add_argument("--master", action="append", help="a master table: NAME=FILE (repeatable)")
    query.add_argument("--memory", required=True, help="memory budget (e.g. 64MB, 1GiB)")
    query.add_argument("--out", required=True, help="output Parquet file")
    query.add_argument("--stats", action="store_true", help="print a JSON report to stdout")
    query.add_argument(
        "--batch-rows",
        type=int,
        default=DEFAULT_BATCH_ROWS,
        help=f"stream rows per batch (default {DEFAULT_BATCH_ROWS:,})",
    )
    query.set_defaults(handler=lambda a, _extra: _cmd_query(a))
