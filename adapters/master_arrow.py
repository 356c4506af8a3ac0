"""The connectorx fetch path of a master scan: partitions read as Arrow, no Python objects per value."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ssbj.adapters.master_layout import python_type
from ssbj.errors import ConfigError, TransientError
from ssbj.retry import RetryPolicy, with_retries

log = logging.getLogger("ssbj.adapters.master_sql")

_CX_SCHEMES = {"mysql": "mysql", "mariadb": "mysql", "postgresql": "postgresql"}
_CX_TRANSIENT = (
    "connection refused",
    "timed out",
    "timeout",
    "broken pipe",
    "reset by peer",
    "lost connection",
    "gone away",
    "can't connect",
    "connection closed",
    "shutdown",
    "io error",
)


class ArrowReader:
    """Partitions fetched by connectorx as Arrow, without Python objects per value.

    connectorx takes SQL text, not parameters; it is used only when every value put into the
    text is a partition boundary of an *integer* page column (rendered as digits by
    SQLAlchemy), so no text from the database or the configuration reaches the SQL.
    """

    def __init__(self, url: str, password: str | None, table: str, dialect: sa.Dialect) -> None:
        self._url = url
        # SQL text for connectorx: a "named" paramstyle, so that a literal % (the modulo of a
        # shard predicate) is not escaped to %% as it is for PyMySQL's pyformat
        make: Any = type(dialect)
        self._dialect = make(paramstyle="named")
        if getattr(dialect, "is_mariadb", False):
            self._dialect.is_mariadb = True  # type: ignore[attr-defined]
        self._password = password
        self._table = table
        self.usable = True

    @classmethod
    def for_scan(cls, engine: Engine, page: sa.Column[Any], reader: str, table: str) -> ArrowReader | None:
        """Return a reader when ``reader`` asks for one and the scan allows it, else None."""
        if reader == "driver":
            return None
        why = None
        scheme = _CX_SCHEMES.get(engine.dialect.name)
        if scheme is None:
            why = f"the {engine.dialect.name} dialect is not supported by connectorx here"
        elif python_type(page) is not int:
            why = f"page column {page.name!r} is not an integer column"
        else:
            try:
                import connectorx  # noqa: F401
            except ImportError:
                why = "connectorx is not installed (pip install 'ssbj[fast]')"
        if why is not None:
            if reader == "connectorx":
                raise ConfigError(f"master reader connectorx cannot be used for {table}: {why}")
            return None
        url = engine.url.set(drivername=str(scheme))
        return cls(url.render_as_string(hide_password=False), engine.url.password, table, engine.dialect)

    def _scrub(self, text: str) -> str:
        return text.replace(self._password, "***") if self._password else text

    def read(self, q: Any, schema: pa.Schema, retry: RetryPolicy, p: int) -> pa.Table | None:
        """Fetch partition ``p``; None (and the driver from then on) if connectorx cannot read it."""
        import connectorx as cx

        bounds = [bp.value for bp in q.compile().binds.values()]
        if any(type(v) is not int for v in bounds):  # never render other values into SQL text
            self.usable = False
            return None
        sql = str(q.compile(dialect=self._dialect, compile_kwargs={"literal_binds": True}))

        def message(e: Exception) -> str:
            return self._scrub(" ".join(str(e).split()))[:300]

        def transient(e: Exception) -> bool:  # connectorx raises plain RuntimeError/ValueError subclasses
            return any(w in message(e).lower() for w in _CX_TRANSIENT)

        try:
            got = with_retries(
                lambda: cx.read_sql(self._url, sql, return_type="arrow"),
                retry,
                transient,
                f"reading master partition {p} of {self._table}",
                log,
                detail=message,
                last_error=message,
            )
        except Exception as e:
            if isinstance(e, TransientError):
                raise
            log.warning("connectorx cannot read %s (%s); using the database driver instead", self._table, message(e))
            self.usable = False
            return None
        table = got if isinstance(got, pa.Table) else pa.Table.from_batches(list(got))
        if table.num_rows == 0:
            return schema.empty_table()
        try:
            arrays = [table.column(i).cast(f.type) for i, f in enumerate(schema)]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            log.warning("connectorx types of %s do not cast to %s (%s); using the driver", self._table, schema, e)
            self.usable = False
            return None
        return pa.Table.from_arrays(arrays, schema=schema)
