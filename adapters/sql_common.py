"""What the SQL master scan and the SQL sink share: engines, retries, identifiers, type mapping."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, Connection, Engine

from ssbj.errors import ConfigError, DependencyError, ServiceError, TerminalError
from ssbj.retry import RetryPolicy, with_retries

T = TypeVar("T")

# MySQL/MariaDB server errors worth a retry: too many connections, server shutting down,
# network read/write errors, lock wait timeout, deadlock, connection killed, idle timeout.
_MYSQL_TRANSIENT = frozenset({1040, 1053, 1158, 1159, 1160, 1161, 1205, 1213, 1927, 4031})
# PostgreSQL SQLSTATEs worth a retry (class 08 connection exceptions are matched by prefix):
# serialization failure, deadlock, lock not available, too many connections, admin/crash
# shutdown, cannot connect now.
_PG_TRANSIENT = frozenset({"40001", "40P01", "55P03", "53300", "57P01", "57P02", "57P03"})
# libpq connection failures carry no SQLSTATE; these messages will not go away on retry
_PG_CONNECT_TERMINAL = ("does not exist", "authentication failed", "pg_hba.conf", "permission denied")


CONNECT_TIMEOUT_S = 10
IO_TIMEOUT_S = 600  # a network that drops packets silently must not block a read forever


def timeouts(backend: str) -> dict[str, Any]:
    """Driver connect arguments that bound connect and read/write waits, per database backend."""
    if backend in ("mysql", "mariadb"):
        return {"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": IO_TIMEOUT_S, "write_timeout": IO_TIMEOUT_S}
    if backend == "postgresql":
        return {"connect_timeout": CONNECT_TIMEOUT_S}
    return {}


def make_engine(source: Engine | URL | str, *, local_infile: bool = False) -> tuple[Engine, bool]:
    """Return ``(engine, owned)``: a given engine as is, or a new one (``pool_pre_ping``) for a URL.

    ``local_infile`` lets a MySQL/MariaDB connection send a file the client names in
    ``LOAD DATA LOCAL INFILE`` (the bulk path of the SQL sink).
    """
    if isinstance(source, Engine):
        return source, False
    try:
        url = sa.make_url(source)
    except sa_exc.ArgumentError as e:
        raise ConfigError(f"not a database URL: {e}") from None
    try:
        args = timeouts(url.get_backend_name())
        if local_infile and url.get_backend_name() in ("mysql", "mariadb") and url.get_driver_name() == "pymysql":
            args["local_infile"] = True
        return sa.create_engine(url, pool_pre_ping=True, connect_args=args), True
    except (ImportError, sa_exc.NoSuchModuleError) as e:  # the URL names a driver that is not installed
        where = url.render_as_string(hide_password=True)
        raise DependencyError(f"cannot create an engine for {where}: {type(e).__name__}: {e}") from None
    except sa_exc.ArgumentError as e:
        where = url.render_as_string(hide_password=True)
        raise ConfigError(f"cannot create an engine for {where}: {type(e).__name__}: {e}") from None


def safe_url(engine: Engine) -> str:
    """Return the engine's URL with the password hidden, for logs and messages."""
    return engine.url.render_as_string(hide_password=True)


def is_transient(exc: BaseException) -> bool:
    """Whether retrying may help: lost or refused connections, pool timeouts, deadlocks, locks."""
    if isinstance(exc, sa_exc.DisconnectionError | sa_exc.TimeoutError):
        return True
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    orig = exc.orig
    code = orig.args[0] if orig is not None and orig.args and isinstance(orig.args[0], int) else None
    module = type(orig).__module__ if orig is not None else ""
    if module.startswith(("pymysql", "MySQLdb", "mysql", "mariadb")) and code is not None:
        # 2000-2999 are client-side errors: cannot connect, server gone away, lost connection...
        return 2000 <= code < 3000 or code in _MYSQL_TRANSIENT
    sqlstate = getattr(orig, "sqlstate", None) if orig is not None else None
    if module.startswith(("psycopg", "psycopg2", "asyncpg", "pg8000")):
        if sqlstate is None:  # failed to connect, or the connection broke: no SQLSTATE
            text = str(orig).lower()
            if any(m in text for m in _PG_CONNECT_TERMINAL):
                return False
            return isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
        return str(sqlstate).startswith("08") or sqlstate in _PG_TRANSIENT
    if module.startswith("sqlite3"):
        return "locked" in str(orig).lower() or "busy" in str(orig).lower()
    # unknown driver: PEP 249 OperationalError covers disconnects and similar failures
    return isinstance(exc, sa_exc.OperationalError)


def describe_error(exc: BaseException, engine: Engine) -> str:
    """``Class: driver message`` without the SQL text, parameters or password."""
    orig = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    msg = " ".join(str(orig).split())[:300]
    password = engine.url.password
    if password:
        msg = msg.replace(str(password), "***")
    return f"{type(orig).__name__}: {msg}"


class SqlRunner:
    """Runs a unit of work on a fresh connection, retrying transient failures with backoff."""

    def __init__(self, engine: Engine, retry: RetryPolicy, what: str, logger: logging.Logger) -> None:
        self.engine = engine
        self.retry = retry
        self.what = what
        self._log = logger

    def run(
        self,
        work: Callable[[Connection], T],
        action: str,
        *,
        transaction: bool = False,
        terminal: type[TerminalError] = ServiceError,
        isolation: str | None = None,
    ) -> T:
        """Run ``work(conn)`` (inside one transaction if ``transaction``), retrying transient errors.

        After the last attempt a :class:`TransientError` is raised; a database error that a
        retry cannot fix is raised as ``terminal`` (both name the database and ``what``).
        """
        db_errors = (sa_exc.DBAPIError, sa_exc.DisconnectionError, sa_exc.TimeoutError)

        def attempt() -> T:
            with self.engine.connect() as conn:
                if isolation is not None:
                    conn = conn.execution_options(isolation_level=isolation)
                if not transaction:
                    return work(conn)
                with conn.begin():
                    return work(conn)

        label = f"{action} ({self.what} on {safe_url(self.engine)})"
        try:
            return with_retries(
                attempt,
                self.retry,
                lambda e: isinstance(e, db_errors) and is_transient(e),
                label,
                self._log,
                detail=lambda e: (
                    type(e.orig if isinstance(e, sa_exc.DBAPIError) and e.orig is not None else e).__name__
                ),
                last_error=lambda e: describe_error(e, self.engine),
            )
        except db_errors as e:  # not transient: a retry cannot fix it
            raise terminal(f"{label} failed: {describe_error(e, self.engine)}") from e


def arrow_type_for_sql(sql_type: sa.types.TypeEngine[object], dialect: str) -> pa.DataType | None:
    """Return the Arrow type that holds every value of a reflected column type, or None if unsupported."""
    t = sql_type
    name = type(t).__name__.upper()
    if isinstance(t, sa.Boolean):
        return pa.bool_()
    if isinstance(t, sa.Integer):
        if dialect == "sqlite":  # SQLite integers are 64-bit whatever the declared type
            return pa.int64()
        unsigned = bool(getattr(t, "unsigned", False))
        if name == "TINYINT":
            return pa.uint8() if unsigned else pa.int8()
        if isinstance(t, sa.SmallInteger) or name == "SMALLINT":
            return pa.uint16() if unsigned else pa.int16()
        if isinstance(t, sa.BigInteger) or name == "BIGINT":
            return pa.uint64() if unsigned else pa.int64()
        return pa.uint32() if unsigned else pa.int32()  # INTEGER, MEDIUMINT
    if isinstance(t, sa.Float):
        if isinstance(t, sa.Double) or dialect == "sqlite":
            return pa.float64()
        if isinstance(t, sa.REAL) and dialect == "postgresql":
            return pa.float32()
        if name == "FLOAT" and dialect in ("mysql", "mariadb") and (t.precision is None or t.precision <= 24):
            return pa.float32()
        return pa.float64()
    if isinstance(t, sa.Numeric):
        p, s = t.precision, t.scale
        if p is None:
            return None  # unconstrained NUMERIC: no exact Arrow type
        s = s or 0
        return pa.decimal128(p, s) if p <= 38 else pa.decimal256(p, s)
    if isinstance(t, sa.DateTime):
        return pa.timestamp("us", tz="UTC") if t.timezone else pa.timestamp("us")
    if isinstance(t, sa.Date):
        return pa.date32()
    if isinstance(t, sa.String):  # VARCHAR, CHAR, TEXT, ENUM, ...
        return pa.string()
    if isinstance(t, sa.LargeBinary | sa.types._Binary):
        return pa.binary()
    return None


def read_type_for(arrow_type: pa.DataType, sql_type: sa.types.TypeEngine[object]) -> sa.types.TypeEngine[object]:
    """Return the SQLAlchemy type to read a column as, so that the driver's value fits ``arrow_type``.

    Reflected MySQL FLOAT/DOUBLE columns would otherwise come back as ``Decimal``.
    """
    if pa.types.is_floating(arrow_type):
        return sa.Double(asdecimal=False)
    return sql_type
