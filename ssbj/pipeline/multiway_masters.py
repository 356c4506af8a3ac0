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
import pyarrow.compute as pc
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
from ssbj.sql.logical import parse_query

log = logging.getLogger("ssbj.multiway")

STREAM_TAG = "ssbj_stream"  # column naming the stream of a raw record when two sources are read as one union
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
        inputs = {**{st.name: st.arrow_schema for st, _ in cfg.streams()}, **self.schemas}
        self.spec: MultiWaySpec = compile_sql(
            cfg.query_text, inputs, streams=set(cfg.stream_names), lateness=cfg.join.lateness or 0
        )
        names = set(cfg.stream_names)
        self.stream_tables = {  # stream alias -> the name the job file gives the stream
            i.alias: i.table for i in parse_query(cfg.query_text, inputs).inputs if i.table in names
        }
        self._check_event_times()
        need = needed_columns(self.spec)
        self.columns: dict[str, list[str]] = {}
        for m in self.spec.masters:  # two aliases of one table read it once, with both's columns
            cols = self.columns.setdefault(m.table, [])
            cols += [c for c in need[m.alias] if c not in cols]
        self.output_schema = self._output_schema()
        self.stream_key = self._stream_key()

    def _check_event_times(self) -> None:
        """Check that a declared ``event_time`` is the column the SQL's window compares."""
        w = self.spec.window
        if w is None:
            return
        used = {self.spec.stream: w.probe_time, w.stream: w.time}
        for st, _ in self.cfg.streams():
            alias = self.alias_of(st.name)
            if st.event_time is not None and st.event_time != used[alias]:
                raise ConfigError(
                    f"stream {st.name!r}: event_time is {st.event_time!r}, but the SQL's window compares "
                    f"{alias}.{used[alias]}"
                )

    def alias_of(self, name: str) -> str:
        """Return the alias the SQL gives the stream the job file calls ``name``."""
        for alias, table in self.stream_tables.items():
            if table == name:
                return alias
        raise ConfigError(f"the SQL does not read the stream {name!r}")  # pragma: no cover - config checks it

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
        tables = {self.alias_of(st.name): st.arrow_schema for st, _ in self.cfg.streams()}
        tables.update({m.alias: self.schemas[m.table] for m in self.spec.masters})
        fields = []
        for o in self.spec.output:
            f = tables[o.alias].field(o.column)
            # a left edge NULL-extends: master columns may be NULL in the output whatever R declares
            fields.append(pa.field(o.name, f.type, nullable=True))
        return pa.schema(fields)

    def _stream_key(self) -> str:
        return self.key_of(self.cfg.stream.name)

    def key_of(self, name: str) -> str:
        """Return the field a record of stream ``name`` must have (declared, or its first join column)."""
        st = next(st for st, _ in self.cfg.streams() if st.name == name)
        if st.key is not None:
            return st.key
        alias, w = self.alias_of(name), self.spec.window
        if w is not None:
            return w.probe_keys[0] if alias == self.spec.stream else w.keys[0]
        for e in self.spec.edges:
            if e.probe == alias:
                return e.probe_columns[0]
        return str(st.arrow_schema.names[0])  # pragma: no cover - the stream always joins something

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
    def decoder(self, name: str | None = None) -> Callable[[pa.Table], Decoded]:
        """Decode raw records of a stream's source (default: the first) into typed rows and dead letters."""
        name = self.cfg.stream.name if name is None else name
        st, src = next((st, src) for st, src in self.cfg.streams() if st.name == name)
        schema, key = st.arrow_schema, self.key_of(name)
        pos = self.spec.window is not None  # a late row becomes a dead letter after decoding: keep where rows are
        if src.kind == "files":
            fmt, delim, header = src.format, src.csv_delimiter, src.csv_header
            return lambda raw: decode_files(raw, fmt, schema, key, delim, header, positions=pos)
        return lambda raw: decode_kafka(raw, schema, key, positions=pos)

    def stream_decoder(self) -> Callable[[pa.Table], dict[str, Decoded]]:
        """Decode a micro-batch of every stream's raw records (a union tagged by the ``ssbj_stream`` column).

        Returns decoded rows per stream *alias* (the name the SQL gives it), in the spec's stream order.
        """
        decoders = {self.alias_of(name): (name, self.decoder(name)) for name in self.cfg.stream_names}

        def decode(raw: pa.Table) -> dict[str, Decoded]:
            tags = raw.column(STREAM_TAG)
            out: dict[str, Decoded] = {}
            for alias in self.spec.streams:
                name, dec = decoders[alias]
                part = raw.filter(pc.equal(tags, name)).drop_columns([STREAM_TAG])
                out[alias] = dec(part)
            return out

        return decode


def _read_all(scan: SqlMasterScan) -> pa.Table:
    return pa.concat_tables([scan.read_partition(p) for p in range(scan.num_partitions())])
