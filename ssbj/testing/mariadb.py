"""A real MariaDB server for tests, benchmarks and the Airflow demo: a throw-away ``mariadbd``.

:func:`launch` (and the ``mariadb`` fixture of ``tests/conftest.py``) initialises a data
directory in a temporary directory, starts ``mariadbd`` on a free loopback port and returns
a :class:`MariaDBServer` whose ``url`` logs in as user ``ssbj`` (with a password, so tests
can check that no secret reaches a log) to database ``ssbj``.  ``stop()`` and ``start()``
restart the same server on the same port, to simulate an outage.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from sqlalchemy.engine import URL

USER = "ssbj"
PASSWORD = "s3cret-pw-ssbj"  # noqa: S105 - a throw-away test server on loopback
DATABASE = "ssbj"

# settings that make a test server start, stop and write fast; durability is not needed
_FAST = (
    "--innodb-buffer-pool-size=256M",
    "--innodb-log-file-size=64M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
    "--skip-log-bin",
    "--performance-schema=0",
)


def find_binaries() -> tuple[str, str] | None:
    """Paths of ``mariadbd`` and ``mariadb-install-db``, or None if either is missing."""
    server = shutil.which("mariadbd") or next(
        (p for p in ("/usr/sbin/mariadbd", "/usr/libexec/mariadbd") if os.access(p, os.X_OK)), None
    )
    install = shutil.which("mariadb-install-db")
    if server is None or install is None:
        return None
    return server, install


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MariaDBServer:
    """A ``mariadbd`` process over a private data directory, on a fixed loopback port."""

    def __init__(self, base: Path, server: str, install: str, port: int | None = None) -> None:
        self.base = base
        self.datadir = base / "data"
        self.socket = base / "mysqld.sock"
        self.pid_file = base / "mysqld.pid"
        self.log_file = base / "mysqld.log"
        self.port = port if port is not None else free_port()
        self._server = server
        self._install = install
        self._proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ URLs
    @property
    def url(self) -> URL:
        """SQLAlchemy URL of database ``ssbj`` as user ``ssbj`` (with a password)."""
        return URL.create(
            "mysql+pymysql", username=USER, password=PASSWORD, host="127.0.0.1", port=self.port, database=DATABASE
        )

    @property
    def root_url(self) -> URL:
        """SQLAlchemy URL as root (empty password over TCP), no default database."""
        return URL.create("mysql+pymysql", username="root", host="127.0.0.1", port=self.port)

    # ------------------------------------------------------------- lifecycle
    def initialise(self) -> None:
        """Create the data directory (system tables only, no test database)."""
        self.datadir.mkdir(parents=True)
        subprocess.run(  # noqa: S603  (our own binaries and paths)
            [
                self._install,
                "--no-defaults",
                "--user=root",
                f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *_FAST,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self, timeout: float = 30.0) -> None:
        """Start the server (same data directory and port as before) and wait until it answers."""
        if self.running:
            return
        with self.log_file.open("ab") as log:
            self._proc = subprocess.Popen(  # noqa: S603  (our own binaries and paths)
                [
                    self._server,
                    "--no-defaults",
                    "--user=root",
                    f"--datadir={self.datadir}",
                    f"--socket={self.socket}",
                    f"--pid-file={self.pid_file}",
                    "--bind-address=127.0.0.1",
                    f"--port={self.port}",
                    "--skip-name-resolve",
                    *_FAST,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self._wait_ready(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the server down (SIGTERM, a clean InnoDB shutdown) and wait for the process to end."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def create_database(self) -> None:
        """Create database ``ssbj`` and user ``ssbj`` with all rights on it."""
        import pymysql  # type: ignore[import-untyped]  # optional extra (mysql)

        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
                cur.execute("CREATE USER IF NOT EXISTS %s@'127.0.0.1' IDENTIFIED BY %s", (USER, PASSWORD))
                cur.execute(f"GRANT ALL PRIVILEGES ON `{DATABASE}`.* TO %s@'127.0.0.1'", (USER,))
        finally:
            conn.close()

    def _wait_ready(self, timeout: float) -> None:
        import pymysql  # type: ignore[import-untyped]  # optional extra (mysql)

        deadline = time.monotonic() + timeout
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(
                    f"mariadbd exited with {self._proc.returncode}; see {self.log_file}:\n{self.log_tail()}"
                )
            try:
                pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", connect_timeout=2).close()
                return
            except pymysql.err.OperationalError as e:
                if time.monotonic() > deadline:
                    msg = f"mariadbd did not accept connections within {timeout} s:\n{self.log_tail()}"
                    raise RuntimeError(msg) from e
                time.sleep(0.05)

    def log_tail(self, lines: int = 20) -> str:
        """Return the last lines of the server's log."""
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def launch(base: Path | None = None) -> MariaDBServer:
    """Initialise and start a fresh server with database ``ssbj`` (in ``base`` or a new temp dir).

    Raises :class:`FileNotFoundError` when the MariaDB binaries are not installed.
    """
    binaries = find_binaries()
    if binaries is None:
        raise FileNotFoundError("mariadbd / mariadb-install-db not found (Debian: apt-get install mariadb-server)")
    root = base if base is not None else Path(tempfile.mkdtemp(prefix="ssbj-mariadb-"))
    server = MariaDBServer(root, *binaries)
    server.initialise()
    try:
        server.start()
        server.create_database()
    except BaseException:
        server.stop()
        raise
    return server
