"""The one import of sqlglot (extra ``sql``): modules use ``exp`` only inside functions, after ``require()``."""

from __future__ import annotations

from typing import Any

from ssbj.errors import DependencyError

try:
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError
    from sqlglot.optimizer.simplify import simplify
except ImportError:  # pragma: no cover - the extra is installed in development
    sqlglot: Any = None  # type: ignore[no-redef]
    exp: Any = None  # type: ignore[no-redef]
    ParseError: Any = None  # type: ignore[no-redef]
    simplify: Any = None  # type: ignore[no-redef]

__all__ = ["ParseError", "exp", "require", "simplify", "sqlglot"]


def require() -> None:
    """Raise :class:`DependencyError` naming the extra when sqlglot is not installed."""
    if sqlglot is None:
        raise DependencyError("the SQL front end needs sqlglot: pip install 'ssbj[sql]'")
