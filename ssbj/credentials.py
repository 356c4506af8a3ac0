"""The one credentials resolver and engine factory: config stays plain data, secrets are read here.

A database's URL comes from ``url`` (no password allowed in it), ``url_env`` or an Airflow
``connection_id`` (``AIRFLOW_CONN_<ID>`` in the environment first, then Airflow's own
lookup), and its password from ``password_env``; a broker's settings from the file, its
Airflow connection and ``secret_options_env``. Nothing here logs a secret: URLs leave as
:class:`~pydantic.SecretStr` and are shown with the password hidden.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pydantic import SecretStr
from sqlalchemy.engine import URL, Engine, make_url

from ssbj.adapters.sql_common import make_engine
from ssbj.config import Database, DatabaseSink, KafkaSource
from ssbj.errors import ConfigError

# conn_type of an Airflow connection -> SQLAlchemy dialect+driver (the one map; the DAGs use it too)
AIRFLOW_DRIVERS = {
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "sqlite": "sqlite",
}


def dialect_of_conn_type(conn_type: str) -> str:
    """Return the SQL dialect (``mysql``, ``postgresql``, ``sqlite``) of an Airflow connection type."""
    driver = AIRFLOW_DRIVERS.get(conn_type.replace("-", "_"))
    if driver is None:
        raise ConfigError(
            f"Airflow connection type {conn_type!r} is not supported: {', '.join(sorted(AIRFLOW_DRIVERS))}"
        )
    return driver.split("+", 1)[0]


def airflow_connection(conn_id: str) -> dict[str, Any]:
    """Return the parts of an Airflow connection (``AIRFLOW_CONN_<ID>``, or Airflow's own lookup).

    Keys: conn_type, host, port, login, password, schema, extra (a dict).
    """
    env = os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}")
    if env is None:
        try:
            from airflow.sdk import BaseHook  # type: ignore[import-not-found,unused-ignore]  # optional: Airflow
        except ImportError as exc:
            raise ConfigError(
                f"Airflow connection {conn_id!r}: looked for AIRFLOW_CONN_{conn_id.upper()} in the environment "
                "(not set) and in Airflow (not installed)"
            ) from exc
        env = str(BaseHook.get_connection(conn_id).get_uri())
    if env.lstrip().startswith("{"):
        d = json.loads(env)
        extra = d.get("extra") or {}
        return {
            "conn_type": d.get("conn_type", ""),
            "host": d.get("host") or "",
            "port": d.get("port"),
            "login": d.get("login"),
            "password": d.get("password"),
            "schema": d.get("schema") or "",
            "extra": json.loads(extra) if isinstance(extra, str) else dict(extra),
        }
    parts = urlsplit(env)
    query = dict(parse_qsl(parts.query))
    extra = json.loads(query["__extra__"]) if "__extra__" in query else query
    return {
        "conn_type": parts.scheme,
        "host": unquote(parts.hostname or ""),
        "port": parts.port,
        "login": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
        "schema": parts.path.lstrip("/"),
        "extra": extra,
    }


def _airflow_connection_url(conn_id: str) -> str:
    """SQLAlchemy URL of an Airflow database connection."""
    c = airflow_connection(conn_id)
    ctype, host, port, login, pw, schema = (c[k] for k in ("conn_type", "host", "port", "login", "password", "schema"))
    driver = AIRFLOW_DRIVERS.get(ctype.replace("-", "_"))
    if driver is None:
        raise ConfigError(
            f"Airflow connection {conn_id!r} has type {ctype!r}; supported: {', '.join(sorted(AIRFLOW_DRIVERS))}"
        )
    if driver == "sqlite":
        return f"sqlite:///{host or schema}"
    url = URL.create(driver, username=login, password=pw, host=host or None, port=port, database=schema or None)
    return url.render_as_string(hide_password=False)


def database_url(db: Database) -> SecretStr:
    """Return the full SQLAlchemy URL of ``db``, password included, as a secret."""
    if db.url_env:
        raw = os.environ.get(db.url_env)
        if not raw:
            raise ConfigError(f"environment variable {db.url_env} (url_env) is not set")
        url = make_url(raw)
    elif db.connection_id:
        url = make_url(_airflow_connection_url(db.connection_id))
    else:
        url = make_url(str(db.url))
    if db.password_env:
        pw = os.environ.get(db.password_env)
        if pw is None:
            raise ConfigError(f"environment variable {db.password_env} (password_env) is not set")
        url = url.set(password=pw)
    return SecretStr(url.render_as_string(hide_password=False))


_ENGINES: dict[tuple[str, bool], Engine] = {}


def needs_local_infile(db: Database, resolved: SecretStr | None = None) -> bool:
    """Whether ``db``'s connections must allow ``LOAD DATA LOCAL INFILE`` (a MySQL sink that bulk-loads)."""
    if not isinstance(db, DatabaseSink) or db.bulk == "insert":
        return False
    url = make_url((resolved or database_url(db)).get_secret_value())
    return url.get_backend_name() in ("mysql", "mariadb") and url.get_driver_name() == "pymysql"


def engine(db: Database) -> Engine:
    """Return the engine of ``db``: one per database URL in this process, shared by every caller.

    The master scan, the sinks, the audit table, the quality checks and ``ssbj validate`` all
    get their engine here. A URL gets a second engine only when a bulk-loading MySQL sink
    needs ``local_infile`` and another caller of that URL does not: the option lets the
    server ask the client for files, so it is not turned on where nothing loads.
    """
    return engine_for_url(database_url(db), needs_local_infile(db))


def engine_for_url(url: SecretStr, local_infile: bool = False) -> Engine:
    """Return this process's engine of a resolved URL (executors get URLs the driver resolved)."""
    key = (url.get_secret_value(), local_infile)
    found = _ENGINES.get(key)
    if found is None:
        found = _ENGINES[key] = make_engine(key[0], local_infile=local_infile)[0]
    return found


def dispose_engines() -> None:
    """Close every engine :func:`engine` made (at the end of a command)."""
    for e in _ENGINES.values():
        e.dispose()
    _ENGINES.clear()


def _broker_connection(src: KafkaSource) -> dict[str, Any]:
    return airflow_connection(src.connection_id) if src.connection_id else {}


def kafka_bootstrap(src: KafkaSource) -> str:
    """Return the broker list: from the file, or from the Airflow connection."""
    if src.bootstrap_servers is not None:
        return src.bootstrap_servers
    c = _broker_connection(src)
    servers = c["extra"].get("bootstrap.servers") or (f"{c['host']}:{c['port']}" if c["host"] else "")
    if not servers:
        raise ConfigError(f"Airflow connection {src.connection_id!r} has no bootstrap.servers and no host")
    return str(servers)


def kafka_client_options(src: KafkaSource) -> dict[str, str]:
    """Client settings: the connection's (if any), the file's, then the secrets from the environment."""
    c = _broker_connection(src)
    out = {str(k): str(v) for k, v in c.get("extra", {}).items() if k != "bootstrap.servers"}
    if c.get("login"):
        out.setdefault("sasl.username", str(c["login"]))
    if c.get("password"):
        out.setdefault("sasl.password", str(c["password"]))
    out.update(src.options)
    for k, env in src.secret_options_env.items():
        val = os.environ.get(env)
        if val is None:
            raise ConfigError(f"environment variable {env} (source.secret_options_env.{k}) is not set")
        out[k] = val
    return out


__all__ = [
    "AIRFLOW_DRIVERS",
    "airflow_connection",
    "database_url",
    "dialect_of_conn_type",
    "dispose_engines",
    "engine",
    "kafka_bootstrap",
    "kafka_client_options",
    "needs_local_infile",
]
