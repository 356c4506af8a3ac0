"""The master tables of a multi-way job, read from the job's database, and its compiled query.

* The SQL is compiled against the stream's declared schema and the master tables' columns
  as the database reports them (reflection; no row is read), so an unsupported query gets
  the SQL front end's error at ``ssbj validate`` and at start.
* A **scanned** master is a :class:`SqlMasterScan` (``adapters/master_sql.py``, the
  single-table job's scan): K fixed key ranges of its page column, ``b`` rows each when the
  layout was computed, read one partition per step with the query's columns only. The
  layout is saved in every checkpoint and restored with it, so K never changes under
  waiting rows.
* A **held** master is read whole through the same scan (one partition) when the
  operator is built: at the start of a run, and again at each restore (a restart, a
  query restart after an outage, a replayed batch). It is not refreshed during a run.
* Which masters are held is decided once (``mode``, or ``auto``: the smallest that fit
  ``join.hold_share`` of the budget, at ``COUNT(*)`` rows of the estimated width) and
  saved in the checkpoint with the layouts: a restart keeps the same plan.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.config import MultiWayJobConfig
from ssbj.contracts import MasterScan, TableName
from ssbj.core.multiway.plan import INDEX_BYTES_PER_ROW, needed_columns
from ssbj.core.multiway.spec import MultiWaySpec
from ssbj.credentials import engine
from ssbj.errors import ConfigError
from ssbj.pipeline.records import Decoded, decode_files, decode_kafka
from ssbj.planning import estimate_row_bytes
from ssbj.sql.compile import compile_sql

log = logging.getLogger("ssbj.multiway")

WHOLE = 1 << 40  # partition rows of a held master: one partition holds the table
PARTITION_SHARE = 0.05  # budget share of the partition buffers when b is not given (as the operator's)


@dataclass
class MasterPlan:
    """Held or scanned per master, and the scans' layouts: what a checkpoint keeps."""

    held: dict[str, bool]
    layouts: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """Return the plan as JSON-ready data (a checkpoint's meta)."""
        return {"held": self.held, "layouts": self.layouts}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MasterPlan:
        """Inverse of :meth:`to_dict`."""
        return cls(dict(d["held"]), dict(d["layouts"]))


class JobQuery:
    """The job's database, its master tables' columns, and the compiled query."""

    def __init__(self, cfg: MultiWayJobConfig) -> None:
        self.cfg = cfg
        self.engine: Engine = engine(cfg.database)
        self.schemas = {name: self._scan(name, None, WHOLE, None).schema for name in cfg.masters}
        inputs = {cfg.stream.name: cfg.stream_schema, **self.schemas}
        self.spec: MultiWaySpec = compile_sql(cfg.query_text, inputs, streams={cfg.stream.name})
        need = needed_columns(self.spec)
        self.columns: dict[str, list[str]] = {}
        for m in self.spec.masters:  # two aliases of one table read it once, with both's columns
            cols = self.columns.setdefault(m.table, [])
            cols += [c for c in need[m.alias] if c not in cols]
        self.output_schema = self._output_schema()
        self.stream_key = self._stream_key()

    def table(self, name: str) -> str:
        """Return the database table of the master the SQL calls ``name``."""
        return self.cfg.masters[name].table or name

    def _scan(
        self, name: str, columns: list[str] | None, partition_rows: int, layout: dict[str, Any] | None
    ) -> SqlMasterScan:
        m = self.cfg.masters[name]
        key = columns[0] if columns else self._first_column(name)  # reflection only: any column serves
        return SqlMasterScan(
            self.engine,
            self.table(name),
            key,
            partition_rows,
            columns=columns,
            page_column=m.page_column,
            layout=layout,
            reader=m.reader,
        )

    def _first_column(self, name: str) -> str:
        t = TableName.parse(self.table(name))
        insp = sa.inspect(self.engine)
        cols = insp.get_columns(t.name, schema=t.schema) if insp.has_table(t.name, schema=t.schema) else []
        if not cols:
            raise ConfigError(
                f"masters.{name}: table {self.table(name)!r} does not exist in {self.cfg.database.display()} "
                "or has no columns"
            )
        return str(cols[0]["name"])

    def _output_schema(self) -> pa.Schema:
        tables = {self.spec.stream: self.cfg.stream_schema}
        tables.update({m.alias: self.schemas[m.table] for m in self.spec.masters})
        fields = []
        for o in self.spec.output:
            f = tables[o.alias].field(o.column)
            # a left edge NULL-extends: master columns may be NULL in the output whatever R declares
            fields.append(pa.field(o.name, f.type, nullable=True))
        return pa.schema(fields)

    def _stream_key(self) -> str:
        if self.cfg.stream.key is not None:
            return self.cfg.stream.key
        for e in self.spec.edges:
            if e.probe == self.spec.stream:
                return e.probe_columns[0]
        return str(self.cfg.stream_schema.names[0])  # pragma: no cover - the stream always joins something

    # ------------------------------------------------------------------ masters
    def plan(self, budget: int) -> MasterPlan:
        """Decide which masters are held (one ``COUNT`` each for ``auto``) and compute the scans' layouts."""
        held: dict[str, bool] = {}
        sizes: dict[str, float] = {}
        for name, m in self.cfg.masters.items():
            if m.mode != "auto":
                held[name] = m.mode == "held"
                continue
            scan = self._scan(name, self.columns[name], WHOLE, None)
            rows = scan.count_rows()
            sizes[name] = rows * (estimate_row_bytes(scan.schema) + INDEX_BYTES_PER_ROW)
        room = self.cfg.join.hold_share * budget
        for name in sorted(sizes, key=lambda n: sizes[n]):
            held[name] = sizes[name] <= room
            if held[name]:
                room -= sizes[name]
        layouts: dict[str, dict[str, Any]] = {}
        scanned = [n for n in self.cfg.masters if not held[n]]
        for name in scanned:
            b = self.cfg.masters[name].partition_rows
            if b is None:
                width = estimate_row_bytes(self._scan(name, self.columns[name], WHOLE, None).schema)
                b = max(1, int(PARTITION_SHARE * budget / len(scanned) / max(width, 1.0)))
            layouts[name] = self._scan(name, self.columns[name], b, None).layout()
        log.info("multi-way masters: held %s, scanned %s", sorted(n for n in held if held[n]), scanned)
        return MasterPlan(held, layouts)

    def open(self, plan: MasterPlan) -> dict[str, pa.Table | MasterScan]:
        """Return the operator's masters: held ones read whole now, scanned ones as scans with the plan's layouts."""
        out: dict[str, pa.Table | MasterScan] = {}
        for name in self.cfg.masters:
            cols = self.columns[name]
            if plan.held[name]:
                scan = self._scan(name, cols, WHOLE, None)
                out[name] = scan.read_partition(0) if scan.num_partitions() == 1 else _read_all(scan)
            else:
                lay = plan.layouts[name]
                out[name] = self._scan(name, cols, int(lay["partition_rows"]), lay)
        return out

    # ------------------------------------------------------------------ stream
    def decoder(self) -> Callable[[pa.Table], Decoded]:
        """Decode raw records of the source into typed stream rows and dead letters."""
        schema, key, src = self.cfg.stream_schema, self.stream_key, self.cfg.source
        if src.kind == "files":
            fmt, delim, header = src.format, src.csv_delimiter, src.csv_header
            return lambda raw: decode_files(raw, fmt, schema, key, delim, header)
        return lambda raw: decode_kafka(raw, schema, key)


def _read_all(scan: SqlMasterScan) -> pa.Table:
    return pa.concat_tables([scan.read_partition(p) for p in range(scan.num_partitions())])
