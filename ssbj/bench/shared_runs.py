"""The runs of the shared-jobs benchmark: isolated, shared, checked against DuckDB, predicted.

``run_isolated`` runs every job on its own :class:`~ssbj.core.operator.SemiStreamJoin`
(its own decoding, scan, cache and H_S, as separate applications would); ``run_shared``
runs them all on one :class:`~ssbj.shared.operator.SharedJoin`; ``check_exact`` compares
each job's output with DuckDB's batch join; ``predict`` is what ``ssbj plan`` would say.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.api import null_padded
from ssbj.bench.shared_data import MASTERS, SCHEMAS, Job, Scale, decode
from ssbj.core.master import ArrowMaster
from ssbj.core.operator import SemiStreamJoin
from ssbj.core.spec import JoinSpec
from ssbj.planning import estimate_row_bytes
from ssbj.shared.model import JobSketch, optimize
from ssbj.shared.operator import MasterSource, SharedJobSpec, SharedJoin

Json = dict[str, Any]

_ARROW: dict[tuple[str, str], pa.Table] = {}


def _scan(db: Path, master: str, cols: list[str], s: Scale) -> SqlMasterScan | ArrowMaster:
    key, _ = MASTERS[master]
    if s.master == "arrow":  # R in memory: a partition is a zero-copy slice, reads cost ~nothing
        if (str(db), master) not in _ARROW:
            scan = SqlMasterScan(f"sqlite:///{db}", master, key, 1 << 30, page_column="id")
            _ARROW[(str(db), master)] = scan.read_partition(0)
            scan.close()
        return ArrowMaster(_ARROW[(str(db), master)].select(cols), s.partition_rows)
    return SqlMasterScan(
        f"sqlite:///{db}", master, key, s.partition_rows, columns=cols, page_column="id", reader="auto"
    )


def _memory(ops: list[SemiStreamJoin]) -> int:
    return sum(m.total + m.stream_buffer for m in (op.memory() for op in ops))


def run_isolated(js: list[Job], db: Path, payloads: dict[str, list[bytes]], s: Scale) -> Json:
    """Every job alone: its own decoding, filter, scan, cache and H_S."""
    t0 = time.perf_counter()
    ops = []
    for j in js:
        sp = j.spec
        key, _ = MASTERS[sp.master]
        scan = _scan(db, sp.master, [key, *[c for c in (sp.master_columns or ()) if c != key]], s)
        schema = SCHEMAS[sp.stream] if sp.stream_columns is None else _with_key(SCHEMAS[sp.stream], sp)
        spec = JoinSpec(sp.stream_key, sp.master_key, sp.master_columns, chunk_bytes=1 << 50, max_step_tuples=s.batch)
        ops.append(SemiStreamJoin(spec, scan, schema, scan.schema))
    outs: list[list[pa.Table]] = [[] for _ in js]
    peak = rows_read = 0
    n_batches = len(payloads["orders"])

    read_s = 0.0

    def collect(i: int, res: Any) -> None:
        nonlocal rows_read, read_s
        rows_read += res.metrics.b
        read_s += res.metrics.io_seconds
        j = js[i].spec
        t = res.enriched.select(_out_names(ops[i], j))
        if t.num_rows:
            outs[i].append(t)
        if j.how == "left" and res.unmatched.num_rows:
            outs[i].append(null_padded(res.unmatched, ops[i].output_schema).select(_out_names(ops[i], j)))

    for bi in range(n_batches):
        for i, j in enumerate(js):
            t = decode(j.spec.stream, payloads[j.spec.stream][bi])
            if j.spec.filter is not None:
                t = t.filter(j.spec.filter)
            ops[i].push(t.select(ops[i].stream_schema.names))
            while ops[i].buffered_tuples:
                collect(i, ops[i].step())
        peak = max(peak, _memory(ops))
    for i in range(len(js)):
        for res in ops[i].drain():
            collect(i, res)
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "master_read_seconds": read_s,
        "peak_memory": peak,
        "master_rows_read": rows_read,
        "outputs": [_cat(o) for o in outs],
    }


def _with_key(schema: pa.Schema, sp: SharedJobSpec) -> pa.Schema:
    cols = list(sp.stream_columns or ())
    if sp.stream_key not in cols:
        cols.append(sp.stream_key)
    return pa.schema([schema.field(c) for c in cols])


def _out_names(op: SemiStreamJoin, sp: SharedJobSpec) -> list[str]:
    scols = list(sp.stream_columns) if sp.stream_columns is not None else list(op.stream_schema.names)
    return scols + list(op.output_schema.names[len(op.stream_schema) :])


def _cat(parts: list[pa.Table]) -> pa.Table | None:
    return pa.concat_tables(parts) if parts else None


def run_shared(js: list[Job], db: Path, payloads: dict[str, list[bytes]], s: Scale, pooled: bool = False) -> Json:
    """All jobs on the shared operator: one decoding per stream, one scan per master and key.

    ``pooled``: a scan's disk buffer takes the rows its jobs' buffers would take alone (b
    times the jobs on that master), so its R-cycle has that many times fewer partitions;
    otherwise every scan reads b rows a step, as each isolated job does.
    """
    t0 = time.perf_counter()
    masters = {}
    for m in dict.fromkeys(j.spec.master for j in js):
        key, _ = MASTERS[m]
        cols: list[str] = [key]
        for j in js:
            if j.spec.master == m:
                cols += [c for c in (j.spec.master_columns or ()) if c not in cols]
        n_jobs = sum(j.spec.master == m for j in js)
        scan = _scan(db, m, cols, replace(s, partition_rows=s.partition_rows * n_jobs) if pooled else s)
        masters[m] = MasterSource(scan, scan.schema)
    streams = {n: SCHEMAS[n] for n in dict.fromkeys(j.spec.stream for j in js)}
    sj = SharedJoin([j.spec for j in js], streams, masters, step_rows=s.batch)
    outs: dict[str, list[pa.Table]] = {j.spec.name: [] for j in js}
    peak = peak_store = 0

    def mem() -> int:
        return sum(g.op.memory().total + g.op.memory().stream_buffer for g in sj.groups) + sj.store.nbytes()

    for bi in range(len(payloads["orders"])):
        for name in streams:
            sj.push(name, decode(name, payloads[name][bi]))
        while sj.pending():
            for k, t in sj.step().items():
                outs[k].append(t)
        if mem() > peak:
            peak, peak_store = mem(), sj.store.nbytes()
    for out in sj.drain():
        for k, t in out.items():
            outs[k].append(t)
    seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "master_read_seconds": sj.read_seconds,
        "peak_memory": peak,
        "peak_memory_stream_store": peak_store,
        "master_rows_read": sj.master_rows_read(),
        "scan_groups": [[g.master, g.master_key, g.jobs, g.inline] for g in sj.groups],
        "partition_rows": {m: src.scan.partition_rows for m, src in masters.items()},
        "outputs": [_cat(outs[j.spec.name]) for j in js],
        "counts": {k: c.__dict__ for k, c in sj.counts().items()},
    }


def check_exact(
    js: list[Job], db: Path, payloads: dict[str, list[bytes]], outputs: list[pa.Table | None]
) -> list[Json]:
    """Each job's output against DuckDB's batch join (multisets: EXCEPT ALL both ways)."""
    import duckdb

    con = duckdb.connect()
    for name in SCHEMAS:
        con.register(name, pa.concat_tables([decode(name, p) for p in payloads[name]]))
    src = sqlite3.connect(db)
    for m, (key, cols) in MASTERS.items():
        rows = src.execute(f"select {key}, {', '.join(cols)} from {m}").fetchall()  # noqa: S608  (fixed names)
        con.register(m, pa.table({c: [r[i] for r in rows] for i, c in enumerate([key, *cols])}))
    src.close()
    out = []
    for j, got in zip(js, outputs, strict=True):
        sp = j.spec
        scols = list(sp.stream_columns or SCHEMAS[sp.stream].names)
        mcols = list(sp.master_columns or ())
        sel = ", ".join([f"s.{c}" for c in scols] + [f"m.{c}" for c in mcols])
        kind = "LEFT JOIN" if sp.how == "left" else "JOIN"
        where = f"WHERE {j.where}" if j.where else ""
        want = con.sql(
            f"SELECT {sel} FROM {sp.stream} s {kind} {sp.master} m ON s.{sp.stream_key} = m.{sp.master_key} {where}"  # noqa: S608
        ).to_arrow_table()
        if got is None:
            got = want.schema.empty_table()
        con.register("got_t", got.rename_columns(want.column_names))
        con.register("want_t", want)
        extra = con.execute("SELECT count(*) FROM (SELECT * FROM got_t EXCEPT ALL SELECT * FROM want_t)").fetchall()
        missing = con.execute("SELECT count(*) FROM (SELECT * FROM want_t EXCEPT ALL SELECT * FROM got_t)").fetchall()
        ok = got.num_rows == want.num_rows and extra == [(0,)] and missing == [(0,)]
        out.append({"job": sp.name, "rows": got.num_rows, "expected_rows": want.num_rows, "exact": ok})
    con.close()
    return out


def predict(js: list[Job], db: Path, payloads: dict[str, list[bytes]], s: Scale) -> Json:
    """Return what ``ssbj plan`` would predict for these jobs (ssbj.shared.model), for comparison."""
    v_s = {n: estimate_row_bytes(SCHEMAS[n], decode(n, payloads[n][0])) for n in SCHEMAS}
    sketches = []
    for j in js:
        sp = j.spec
        key, _ = MASTERS[sp.master]
        scan = SqlMasterScan(
            f"sqlite:///{db}",
            sp.master,
            key,
            s.partition_rows,
            columns=[key, *(sp.master_columns or ())],
            page_column="id",
        )
        first = scan.read_partition(0)
        rows = scan.count_rows()
        scan.close()
        sketches.append(
            JobSketch(
                sp.name,
                sp.stream,
                sp.stream_key,
                sp.master,
                sp.master_key,
                10_000.0,
                v_s[sp.stream],
                rows,
                estimate_row_bytes(first.schema, first),
                s.batch,
                s.partition_rows,
            )
        )
    plan = optimize(sketches)
    return {
        "stores": plan.stores,
        "cpu_ratio": plan.isolated_cpu / plan.shared_cpu,
        "memory_ratio": plan.isolated_memory / plan.shared_memory,
        "shared_memory": plan.shared_memory,
        "isolated_memory": plan.isolated_memory,
    }
