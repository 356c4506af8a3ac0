"""R read from a database table, partition by partition, over fixed key ranges of one column.

:class:`SqlMasterScan` implements :class:`ssbj.contracts.CheckpointedMasterScan`
for any SQLAlchemy URL (MariaDB/MySQL via PyMySQL, PostgreSQL via psycopg, SQLite).

Partitioning.  The *page column* is a unique, non-null column (by default the single-column
primary key).  At first use the scan walks it in order and records the value of every b-th
row: K - 1 boundaries ``bound[0] < ... < bound[K-2]``.  Partition ``p`` holds the rows with
``bound[p-1] < page <= bound[p]``; the first partition has no lower bound and the last no
upper bound.  Every row present is therefore in exactly one partition, rows inserted later
land in exactly one partition, and K stays fixed for the life of the layout (the operator's
H_S expiry depends on it).  The layout is saved with the job's checkpoint (:meth:`layout`)
and restored with the ``layout`` argument; :meth:`repartition` computes a fresh one.

Finding the boundaries with one keyset query per partition
(``SELECT page ... WHERE page > :last ORDER BY page LIMIT 1 OFFSET :b-1``) took 84 ms for
1M rows and b = 100,000 on MariaDB, against 1.9 s for one ordered scan of the page column;
the two break even only near b = 100 (see docs/measurements-master-read.md).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine

from ssbj.adapters.master_arrow import ArrowReader
from ssbj.adapters.master_driver import DriverReader
from ssbj.adapters.master_layout import (
    LAYOUT_VERSION,
    Layout,
    compute_layout,
    encode_value,
    partition_expr,
    python_type,
    restore_layout,
)
from ssbj.adapters.shard_sql import shard_predicate
from ssbj.adapters.sql_common import (
    SqlRunner,
    arrow_type_for_sql,
    make_engine,
    read_type_for,
    safe_url,
)
from ssbj.contracts import PARTITION_COLUMN, TableName
from ssbj.core.keys import key_family
from ssbj.core.shards import ModRouter, RangeRouter, Router, route_column
from ssbj.errors import ConfigError, StateError
from ssbj.retry import RetryPolicy

log = logging.getLogger(__name__)

LOOKUP_BATCH = 4_000  # keys per IN list: 10.0 us a key on MariaDB against 15.6 at 500 (bench/results/lookup_batch.md)
MAX_LOOKUP_PARAMS = 30_000  # bound parameters per statement (SQLite allows 32,766, MariaDB 65,535)
GROWTH_WARNING_FACTOR = 4  # warn when a partition holds more than this many times b rows


# ---------------------------------------------------------------- the scan
class SqlMasterScan:
    """R in a database table, read in K partitions over fixed ranges of a unique page column."""

    def __init__(
        self,
        source: Engine | URL | str,
        table: str,
        key: str,
        partition_rows: int,
        *,
        columns: Sequence[str] | None = None,
        page_column: str | None = None,
        layout: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
        reader: str = "driver",
        shard: tuple[Router, int] | None = None,
    ) -> None:
        """Reflect ``table`` and check the configuration; the layout is computed at first use.

        ``reader`` is how partitions are fetched: ``driver`` (the SQLAlchemy driver, e.g.
        PyMySQL), ``connectorx`` (Arrow straight from the database: 14.1x faster on MariaDB,
        needs ``ssbj[fast]`` and an integer page column) or ``auto`` (connectorx when it can).

        ``source`` is an engine or a URL (a URL gets its own engine with ``pool_pre_ping``);
        ``table`` may be ``schema.table``; ``columns`` are the projected columns (default:
        all, in table order; ``key`` is added in front if missing); ``page_column`` defaults to
        the single-column primary key; ``layout`` is a :meth:`layout` dict to restore.

        ``shard`` = (router, s) restricts R to shard s's share (docs/sharding.md): a range or
        modulo router is pushed down as a predicate on ``key`` (layout and partitions are
        then the share's own); a hash router cannot be, so its partitions are filtered after
        reading (the layout, and b, are then of the whole table).
        """
        if isinstance(partition_rows, bool) or not isinstance(partition_rows, int) or partition_rows < 1:
            raise ConfigError(f"partition_rows (b) must be an integer >= 1, got {partition_rows!r}")
        if reader not in ("driver", "connectorx", "auto"):
            raise ConfigError(f"reader must be 'driver', 'connectorx' or 'auto', got {reader!r}")
        self._reader = reader
        self._shard = shard
        self._engine, self._owns_engine = make_engine(source)
        try:
            self._setup(table, key, partition_rows, columns, page_column, layout, retry)
        except BaseException:
            self.close()  # an engine made here for a URL is not left behind
            raise

    def _setup(
        self,
        table: str,
        key: str,
        partition_rows: int,
        columns: Sequence[str] | None,
        page_column: str | None,
        layout: Mapping[str, Any] | None,
        retry: RetryPolicy | None,
    ) -> None:
        self._table_name = table
        name = TableName.parse(table)
        self._schema_name, self._short_name = name.schema, name.name
        self._b = partition_rows
        self._retry = retry if retry is not None else RetryPolicy()
        self._runner = SqlRunner(self._engine, self._retry, f"master table {table}", log)
        self._key = key
        self._sa_table = self._runner.run(self._reflect, "reflecting the master table")
        self._dialect = self._engine.dialect.name
        self._columns = self._check_columns(key, columns)
        self._page = self._check_page_column(page_column)
        self._schema = self._arrow_schema()
        self._read_types = [read_type_for(self._schema.field(n).type, self._sa_table.c[n].type) for n in self._columns]
        self._select = sa.select(
            *[sa.type_coerce(self._sa_table.c[n], t) for n, t in zip(self._columns, self._read_types, strict=True)]
        )
        self._where, self._post = self._shard_filter()
        if self._where is not None:
            self._select = self._select.where(self._where)
        self._layout: Layout | None = self._restore(layout) if layout is not None else None
        self._warned_unindexed: set[str] = set()  # lookup keys warned about (no index: full reads)
        self._warned: dict[int, int] = {}  # partition -> R-cycle in which its growth was logged
        self._cycle = 0
        self._last_p = -1
        self._cx = ArrowReader.for_scan(self._engine, self._page, self._reader, self._table_name)
        self._driver = DriverReader(self._schema, self._read_types, self._table_name)

    # ------------------------------------------------------------ validation
    def _reflect(self, conn: Connection) -> sa.Table:
        try:
            return sa.Table(self._short_name, sa.MetaData(), schema=self._schema_name, autoload_with=conn)
        except sa_exc.NoSuchTableError:
            try:
                names = sorted(sa.inspect(conn).get_table_names(schema=self._schema_name))
            except sa_exc.SQLAlchemyError:
                names = []
            listed = ", ".join(names[:50]) + (" ..." if len(names) > 50 else "") if names else "none"
            raise ConfigError(
                f"master table {self._table_name!r} does not exist in {safe_url(self._engine)} (tables: {listed})"
            ) from None

    def _missing(self, what: str, name: str) -> ConfigError:
        avail = ", ".join(c.name for c in self._sa_table.columns)
        return ConfigError(f"{what} {name!r} is not a column of master table {self._table_name!r} (columns: {avail})")

    def _check_columns(self, key: str, columns: Sequence[str] | None) -> list[str]:
        names = [c.name for c in self._sa_table.columns]
        if key not in names:
            raise self._missing("key column", key)
        if columns is None:
            return names
        if isinstance(columns, str):
            raise ConfigError(f"columns must be a list of column names, got the string {columns!r}")
        cols = list(columns)
        for c in cols:
            if c not in names:
                raise self._missing("column", c)
        dup = sorted({c for c in cols if cols.count(c) > 1})
        if dup:
            raise ConfigError(f"columns of master table {self._table_name!r} listed twice: {', '.join(dup)}")
        return cols if key in cols else [key, *cols]

    def _check_page_column(self, page_column: str | None) -> sa.Column[Any]:
        t = self._sa_table
        pk = [c.name for c in t.primary_key.columns]
        if page_column is None:
            if len(pk) != 1:
                what = f"a composite primary key ({', '.join(pk)})" if pk else "no primary key"
                raise ConfigError(
                    f"master table {self._table_name!r} has {what}: give page_column, a unique non-null column"
                )
            return t.c[pk[0]]
        if page_column not in t.c:
            raise self._missing("page column", page_column)
        col = t.c[page_column]
        if pk == [page_column]:
            return col
        if not self._declared_unique(page_column):
            raise ConfigError(
                f"page column {page_column!r} of master table {self._table_name!r} is neither the primary key "
                "nor covered by a single-column unique index: rows could fall between partitions"
            )
        if col.nullable:
            raise ConfigError(
                f"page column {page_column!r} of master table {self._table_name!r} is nullable: "
                "rows with NULL would be in no partition"
            )
        return col

    def _declared_unique(self, name: str) -> bool:
        """Whether the database enforces ``name`` unique: the primary key, a one-column unique index or constraint."""
        t = self._sa_table
        if [c.name for c in t.primary_key.columns] == [name]:
            return True
        return any(idx.unique and [c.name for c in idx.columns] == [name] for idx in t.indexes) or any(
            isinstance(con, sa.UniqueConstraint) and [c.name for c in con.columns] == [name] for con in t.constraints
        )

    def key_indexed(self, column: str) -> bool:
        """Whether an index starts with ``column`` (the primary key's or another): a lookup by it reads few rows."""
        t = self._sa_table
        pk = [c.name for c in t.primary_key.columns]
        return (bool(pk) and pk[0] == column) or any([c.name for c in idx.columns][:1] == [column] for idx in t.indexes)

    def key_unique(self, column: str) -> bool:
        """Whether the database enforces ``column`` unique (:class:`ssbj.contracts.MasterKeyUnique`).

        From the table's reflected constraints only, never from the rows: a constraint holds
        for every row inserted while the scan runs, a look at today's rows does not.
        """
        return column in self._sa_table.c and self._declared_unique(column)

    def _arrow_schema(self) -> pa.Schema:
        fields = []
        for n in self._columns:
            c = self._sa_table.c[n]
            at = arrow_type_for_sql(c.type, self._dialect)
            if at is None:
                raise ConfigError(
                    f"column {n!r} of master table {self._table_name!r} has type {c.type!r}, which has no Arrow "
                    "mapping (supported: integers, floats, decimals with precision, strings, binary, dates, "
                    "timestamps, booleans); leave it out of columns or cast it in a view"
                )
            fields.append(pa.field(n, at, nullable=bool(c.nullable)))
        return pa.schema(fields)

    def _restore(self, layout: Mapping[str, Any]) -> Layout:
        want = {"table": self._table_name, "page_column": self._page.name, "partition_rows": self._b}
        return restore_layout(layout, want, self.shard_label, self._page)

    # ------------------------------------------------------------ layout
    def _compute_layout(self, conn: Connection) -> Layout:
        return compute_layout(conn, self._sa_table, self._page, self._where, self._b)

    def _ensure_layout(self) -> Layout:
        if self._layout is None:
            lay = self._runner.run(self._compute_layout, "computing the master partitions", transaction=True)
            log.info(
                "master table %s on %s: %d rows in %d partitions of b=%d over %s",
                self._table_name,
                safe_url(self._engine),
                lay.num_rows,
                lay.k,
                self._b,
                self._page.name,
            )
            self._layout = lay
        return self._layout

    def layout(self) -> dict[str, Any]:
        """JSON-serialisable partitioning: boundaries (type-tagged), b, row count, table, page column."""
        lay = self._ensure_layout()
        return {
            "version": LAYOUT_VERSION,
            "table": self._table_name,
            "page_column": self._page.name,
            "partition_rows": self._b,
            "num_rows": lay.num_rows,
            "bounds": [encode_value(b) for b in lay.bounds],
            "shard": self.shard_label,
        }

    # ------------------------------------------------------------ MasterScan
    @property
    def partition_rows(self) -> int:
        """B: master tuples per partition when the layout was computed."""
        return self._b

    @property
    def num_rows(self) -> int:
        """R_t: rows in the table when the layout was computed."""
        return self._ensure_layout().num_rows

    @property
    def schema(self) -> pa.Schema:
        """Arrow schema of the projected columns (configured order, key included)."""
        return self._schema

    def count_rows(self) -> int:
        """Rows in R (in the shard's share, for a pushed-down shard predicate) now: one ``COUNT``."""
        q = sa.select(sa.func.count()).select_from(self._sa_table)
        if self._where is not None:
            q = q.where(self._where)
        return int(self._runner.run(lambda conn: conn.execute(q).scalar_one(), "counting master rows"))

    @property
    def page_column(self) -> str:
        """The unique column the partitions are ranges of."""
        return str(self._page.name)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine the scan reads through."""
        return self._engine

    def num_partitions(self) -> int:
        """K, fixed for the life of the layout."""
        return self._ensure_layout().k

    def read_partition(self, p: int) -> pa.Table:
        """Rows of partition ``p`` (ordered by the page column) as an Arrow table of :attr:`schema`."""
        lay = self._ensure_layout()
        if not 0 <= p < lay.k:
            raise StateError(f"partition {p} out of range 0..{lay.k - 1}")
        q = self._select
        if p > 0:
            q = q.where(self._page > lay.bounds[p - 1])
        if p < lay.k - 1:
            q = q.where(self._page <= lay.bounds[p])
        q = q.order_by(self._page)
        if self._cx is not None and self._cx.usable:
            table = self._cx.read(q, self._schema, self._retry, p)
            if table is not None:
                self._note_size(p, table.num_rows, lay.k)
                return self._filtered(table)
        n, columns = self._runner.run(lambda conn: self._driver.fetch_columns(conn, q), f"reading master partition {p}")
        self._note_size(p, n, lay.k)
        return self._filtered(self._driver.to_arrow(columns, p))

    # ------------------------------------------------------------ shard
    def _shard_filter(self) -> tuple[Any, tuple[Router, int] | None]:
        """Return (SQL predicate, None) for a range/modulo router, (None, (router, s)) for a hash router."""
        if self._shard is None:
            return None, None
        router, s = self._shard
        router.check_family(key_family(self._schema.field(self._key).type))
        if isinstance(router, RangeRouter | ModRouter):
            return shard_predicate(self._sa_table.c[self._key], router, s), None
        return None, (router, s)

    @property
    def shard_label(self) -> str | None:
        """``"<router> <s>/<P>"`` when the scan reads one shard's share, else None (saved in the layout)."""
        if self._shard is None:
            return None
        router, s = self._shard
        return f"{type(router).__name__} {s}/{router.shards}"

    def _filtered(self, table: pa.Table) -> pa.Table:
        if self._post is None or not table.num_rows:
            return table
        router, s = self._post
        family = key_family(self._schema.field(self._key).type)
        return table.filter(pa.array(route_column(table.column(self._key), family, router) == s))

    @property
    def reader(self) -> str:
        """The fetch path in use: ``connectorx`` or ``driver``."""
        return "connectorx" if self._cx is not None and self._cx.usable else "driver"

    def _note_size(self, p: int, n: int, k: int) -> None:
        # an R-cycle starts when partition 0 is read after another one (a re-read of the same
        # partition, as after a failed step, stays in its cycle)
        if p == 0 and (self._last_p != 0 or k == 1):
            self._cycle += 1
        self._last_p = p
        if n > GROWTH_WARNING_FACTOR * self._b and self._warned.get(p) != self._cycle:
            self._warned[p] = self._cycle
            log.warning(
                "master partition %d of %s holds %d rows, more than %d x b=%d: the table grew since the layout "
                "was computed; repartition to keep the disk buffer at its planned size",
                p,
                self._table_name,
                n,
                GROWTH_WARNING_FACTOR,
                self._b,
            )

    # ------------------------------------------------------------ MasterLookup (the hybrid step)
    lookup_batch: int = LOOKUP_BATCH
    """Most keys per ``IN`` list (one round trip each); bound parameters, never SQL text."""

    def lookup(self, key: str, values: pa.Array) -> pa.Table:
        """Return the current rows whose ``key`` is one of ``values``, with their partition.

        Batched ``IN`` lists of bound parameters (SQLAlchemy expanding parameters), at most
        :attr:`lookup_batch` keys each, every batch retried as a partition read is; NULLs
        are never sent. A row's partition is computed by the database (``page > bound``
        comparisons, so its collation decides, as in :meth:`read_partition`), or from the
        fetched page value when the page column is an integer.
        """
        if key not in self._columns:
            raise self._missing("lookup column", key)
        if key not in self._warned_unindexed and not self.key_indexed(key):
            self._warned_unindexed.add(key)
            log.warning(
                "looking up master rows of %s by %s, which no index starts with: every lookup reads the whole "
                "table (join.hybrid is for an indexed key; scan instead)",
                self._table_name,
                key,
            )
        lay = self._ensure_layout()
        keys = pc.unique(pc.drop_null(values)).to_pylist() if len(values) else []
        if not keys:
            return self._with_partition(self._schema.empty_table(), [])
        by_int = python_type(self._page) is int
        extra = self._page if by_int else partition_expr(self._page, lay.bounds)
        q = sa.select(*self._select.selected_columns, extra.label(PARTITION_COLUMN))
        col = self._sa_table.c[key]
        n_cols = len(self._columns)
        tables: list[pa.Table] = []
        parts: list[Any] = []
        size = max(1, min(int(self.lookup_batch), MAX_LOOKUP_PARAMS - len(lay.bounds)))
        for i in range(0, len(keys), size):
            batch = keys[i : i + size]
            stmt = q.where(col.in_(sa.bindparam("keys", batch, expanding=True)))
            n, columns = self._runner.run(partial(self._driver.fetch_columns, q=stmt), f"looking up {len(batch)} keys")
            if n:
                tables.append(self._driver.to_arrow(columns[:n_cols], -1))
                parts.extend(columns[n_cols])
        table = pa.concat_tables(tables) if tables else self._schema.empty_table()
        if by_int:
            part = np.searchsorted(np.asarray(lay.bounds, dtype=np.int64), np.asarray(parts, dtype=np.int64))
            return self._with_partition(table, part)
        return self._with_partition(table, parts)

    @staticmethod
    def _with_partition(table: pa.Table, part: Sequence[int] | np.ndarray) -> pa.Table:
        return table.append_column(PARTITION_COLUMN, pa.array(np.asarray(part, dtype=np.int64), pa.int32()))

    def repartition(self, partition_rows: int) -> SqlMasterScan:
        """Return the same table and columns in partitions of ``partition_rows``, with a freshly computed layout."""
        scan = SqlMasterScan(
            self._engine,
            self._table_name,
            self._key,
            partition_rows,
            columns=self._columns,
            page_column=self._page.name,
            retry=self._retry,
            reader=self._reader,
            shard=self._shard,
        )
        scan._owns_engine = self._owns_engine
        scan._ensure_layout()
        return scan

    def close(self) -> None:
        """Dispose of the engine if this scan (or the scan it was repartitioned from) created it."""
        if self._owns_engine:
            self._engine.dispose()
