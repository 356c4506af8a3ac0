"""Theorem 1's bound with R read from a database, the setting the theorem assumes.

The bound experiment (:mod:`ssbj.bench.exp_bound`) holds R in memory: a partition costs
only its probe, so the stream tuples a step joins are a large part of an R-cycle's time,
and SSBJ, which joins several times more tuples per R-cycle, has the longer R-cycle (its
*R-cycle time* factor, 0.6-0.8). The bound assumes both R-cycles take the same time, which
holds where reading R dominates. Here the same data's R is a SQLite table read by the
product's adapter (:class:`ssbj.adapters.master_sql.SqlMasterScan`, partitions over ranges
of the primary key ``mid``, the driver reader), so each partition is a query and reading
R is most of an R-cycle for both algorithms.

Skew 1, stationary, at the preset's budgets, with the same bound, structural bound and
efficiency factors as the in-memory experiment. b is planned as for any master that does
not stream pieces (the disk buffer is charged a whole partition), the same for both. An
R-cycle takes seconds, so fewer R-cycles are measured than in memory (at most ``MEASURE``,
in ``REPS`` interleaved repetitions); the warm-up is the preset's, as in memory (SSBJ's
cache is still filling after six R-cycles: a first run warmed up for six held 560k tuples
per R-cycle at 10% of R, one warmed up for twelve 599k, at a b 25% larger).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import sqlalchemy as sa

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.adapters.sql_tables import sql_type_for_arrow
from ssbj.bench.exp_bound import bound_point, issue_dataset
from ssbj.bench.harness import Bench, Json

TABLE = "master"
SKEW = 1.0
MEASURE = 3
REPS = 2
INSERT_ROWS = 100_000  # rows per executemany while the table is written
READ_SIZES = (200, 5_000)  # partitions (k) of the two read-cost samples: 10,000 and 400 rows at |R| = 2M
READS = 8  # partitions timed at each size
REPEATS = 3  # reads of each (the fastest kept)


@dataclass(frozen=True, eq=False)
class SqlMaster:
    """Open the SQL master scan for b = ``partition_rows`` (one per run; the engine is shared)."""

    engine: sa.Engine
    table: str
    key: str
    columns: tuple[str, ...]

    def __call__(self, partition_rows: int) -> SqlMasterScan:
        """Return a scan of the table in partitions of ``partition_rows`` rows."""
        return SqlMasterScan(self.engine, self.table, self.key, partition_rows, columns=list(self.columns))


def write_table(engine: sa.Engine, master: pa.Table, table: str, page: str) -> None:
    """Create ``table`` from ``master`` (the sink's column types) with primary key ``page``, and fill it."""
    cols = [sa.Column(f.name, sql_type_for_arrow(f.type), primary_key=f.name == page) for f in master.schema]
    t = sa.Table(table, sa.MetaData(), *cols)
    t.create(engine)
    insert = str(t.insert().compile(dialect=engine.dialect))  # positional marks, names quoted by the dialect
    with engine.begin() as conn:
        for start in range(0, master.num_rows, INSERT_ROWS):
            part = master.slice(start, INSERT_ROWS)
            conn.exec_driver_sql(insert, list(zip(*(c.to_pylist() for c in part.columns), strict=True)))


def read_costs(factory: SqlMaster, r_rows: int) -> tuple[float, float]:
    """Nanoseconds per partition query and per row read, from reads of large and small partitions.

    The in-memory calibration has no read in it; these go into its ``c_fixed`` and
    ``c_io_row`` so that the planner prices a partition as this source reads it. Each
    partition is read ``REPEATS`` times and its fastest read kept, then the median over
    the partitions: a least-squares line over single reads moved the query cost 2x
    between runs, and medians of single reads of 1,000 and 4,000 rows once gave none.
    """
    med: list[tuple[float, float]] = []
    for k in READ_SIZES:
        scan = factory(max(1, -(-r_rows // k)))
        try:
            n = scan.num_partitions()
            rows, secs = [], []
            for p in range(0, n, max(1, n // READS)):
                best = math.inf
                for _ in range(REPEATS):
                    t = time.perf_counter()
                    got = scan.read_partition(p).num_rows
                    best = min(best, time.perf_counter() - t)
                rows.append(got)
                secs.append(best)
            med.append((float(np.median(rows)), float(np.median(secs))))
        finally:
            scan.close()
    (r_big, t_big), (r_small, t_small) = med
    per_row = max((t_big - t_small) / max(r_big - r_small, 1.0), 0.0)
    per_query = max(t_small - r_small * per_row, 0.0)
    return per_query * 1e9, per_row * 1e9


def exp_bound_sql(bench: Bench) -> Json:
    """SSBJ/MESHJOIN against Theorem 1's bound with R in SQLite, skew 1, stationary."""
    p = bench.p
    sub = bench.derived(
        measure_cycles=min(p.measure_cycles, MEASURE),
        reps=min(p.reps, REPS),
    )
    ds = issue_dataset(sub, p.r_main, SKEW, None)
    path = bench.work_dir / "bound-master.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    engine = sa.create_engine(f"sqlite:///{path}")
    res: Json = {"r_rows": p.r_main, "master": "sqlite", "reader": "driver", "points": []}
    try:
        write_table(engine, ds.master, TABLE, "mid")
        factory = SqlMaster(engine, TABLE, ds.master_key, (ds.master_key, *ds.master_columns))
        probe = factory(max(1, p.r_main // 100))
        try:
            read = probe.read_partition(0)
            res["v_r_read"] = read.nbytes / max(read.num_rows, 1)  # the rows as read (binary, not fixed-size)
        finally:
            probe.close()
        per_query, per_row = read_costs(factory, p.r_main)
        consts = sub.model().k
        sub.set_model(replace(consts, c_fixed=consts.c_fixed + per_query, c_io_row=consts.c_io_row + per_row))
        res["read_cost_ns"] = {"per_query": per_query, "per_row": per_row}
        bench.log(f"  R in SQLite: {per_query / 1e3:.0f} us a query, {per_row:.0f} ns a row")
        for frac in p.bound_mem_fracs:
            bench.log(f"  bound_sql: {ds.name}, R in SQLite, at {frac:.0%} of R")
            pt = bound_point(sub, ds, frac, pieces=False, master_factory=factory)
            pt.update({"skew": SKEW, "drifting": False, "dataset": ds.info})
            res["points"].append(pt)
            if "error" not in pt:
                eff, ach = pt["efficiency"], pt["ratio_service_rate"]
                bench.log(
                    f"    bound {pt['bound']['ratio']:.2f}x, achieved {'-' if ach is None else f'{ach:.2f}x'}, "
                    f"efficiency {'-' if eff is None else f'{eff:.2f}'}, "
                    f"MESHJOIN at {pt['meshjoin_vs_own_bound']:.2f} of its bound"
                )
    finally:
        engine.dispose()
        path.unlink(missing_ok=True)
    return res
