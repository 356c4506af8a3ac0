"""``ssbj maintain``: a continuous query over a landing directory of changes, for checks and ad-hoc runs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ssbj.cq.changes import DEAD_LETTER_SCHEMA, ChangeDirectory
from ssbj.cq.maintainer import ENGINES, BatchDelta, ContinuousQuery
from ssbj.cq.query import plan_query
from ssbj.cq.schema import parse_schema
from ssbj.errors import ConfigError, InputError

DEFAULT_BATCH = 10_000


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc}") from exc


def add_maintain_command(sub: Any) -> None:
    """Register ``maintain`` on the ``ssbj`` subcommand parser."""
    p = sub.add_parser(
        "maintain",
        help="keep a SQL query's answer exact under inserts and deletes (Cquirrel live tuples)",
        description=(
            "Apply the changes in DIR (one <relation>.parquet per relation, with the relation's columns, "
            "_op '+'/'-' and _seq, one global order) to QUERY over the tables of DDL, micro-batch by "
            "micro-batch, and write the answer after the last change to OUT; --deltas lists every change "
            "of the answer with _op and _seq (the last _seq of its micro-batch)."
        ),
    )
    p.add_argument("--sql", required=True, help="file with one SELECT (FK-acyclic equi-joins, SUM/COUNT/AVG)")
    p.add_argument("--schema", required=True, help="file with CREATE TABLE statements (PRIMARY KEY, REFERENCES)")
    p.add_argument("--changes", required=True, help="directory of <relation>.parquet change files")
    p.add_argument("--out", required=True, help="Parquet file for the answer after the last change")
    p.add_argument("--deltas", help="Parquet file for the answer's changes (_op, _seq)")
    p.add_argument("--dead-letters", help="Parquet file for changes not applied (default: OUT's name + .dead.parquet)")
    p.add_argument(
        "--batch-rows", type=int, default=DEFAULT_BATCH, help=f"changes per micro-batch (default {DEFAULT_BATCH:,})"
    )
    p.add_argument("--checkpoint-dir", help="checkpoint after every batch here; resume from it when it holds one")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="auto",
        help="live-tuple engine: fast (arrays, numba), reference (dicts), auto (fast where the query allows); "
        "a resumed run keeps its checkpoint's engine",
    )
    p.set_defaults(handler=lambda a, _extra: run_maintain(a))


def run_maintain(args: argparse.Namespace) -> int:
    """Run ``ssbj maintain``; returns the exit code."""
    if args.batch_rows < 1:
        raise ConfigError(f"--batch-rows must be >= 1, got {args.batch_rows}")
    plan = plan_query(_read(args.sql, "query"), parse_schema(_read(args.schema, "schema")))
    changes = ChangeDirectory(args.changes, plan.relations())
    start = 0
    cid = 0
    if args.checkpoint_dir and (Path(args.checkpoint_dir) / "LATEST").exists():
        cq, manifest = ContinuousQuery.restore(plan, args.checkpoint_dir)
        start = int(manifest.get("position") or 0)
        cid = int((Path(args.checkpoint_dir) / "LATEST").read_text()) + 1
    else:
        cq = ContinuousQuery(plan, engine=args.engine)
    writer = None
    dead: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    try:
        for position, batch in changes.batches(args.batch_rows, start):
            delta = cq.apply(batch)
            dead.extend(d.as_dict() for d in delta.dead)
            if args.deltas:
                table = cq.delta_table(delta)
                if writer is None:
                    writer = pq.ParquetWriter(args.deltas, table.schema)
                writer.write_table(table)
            if args.checkpoint_dir:
                cq.checkpoint(args.checkpoint_dir, cid, position=position)
                cid += 1
    finally:
        if writer is not None:
            writer.close()
    seconds = time.perf_counter() - t0
    if args.deltas and writer is None:
        pq.write_table(cq.delta_table(_empty_delta()), args.deltas)
    result = cq.result()
    pq.write_table(result, args.out)
    dead_path = args.dead_letters or str(Path(args.out).with_suffix("")) + ".dead.parquet"
    if dead or args.dead_letters:
        pq.write_table(pa.Table.from_pylist(dead, schema=DEAD_LETTER_SCHEMA), dead_path)
    report = {
        "changes": len(changes) - start,
        "applied": cq.applied,
        "dead_letters": len(dead),
        "result_rows": result.num_rows,
        "seconds": round(seconds, 3),
        "changes_per_second": round((len(changes) - start) / seconds) if seconds > 0 else None,
    }
    if dead:
        report["dead_letter_file"] = dead_path
    print(json.dumps(report), file=sys.stderr)
    return 0


def _empty_delta() -> BatchDelta:
    return BatchDelta([], [], None, 0, [])
