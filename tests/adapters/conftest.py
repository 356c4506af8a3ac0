"""Fixtures of the SQL adapter tests: an engine on SQLite or on the session's MariaDB server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ssbj.testing.mariadb import MariaDBServer


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.services)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    """An engine on a SQLite file or on the session's MariaDB server."""
    if request.param == "sqlite":
        eng = sa.create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    else:
        server: MariaDBServer = request.getfixturevalue("mariadb")
        eng = sa.create_engine(server.url, pool_pre_ping=True)
    yield eng
    eng.dispose()
