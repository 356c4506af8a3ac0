"""The one import of sqlglot (extra ``sql``) for the continuous-query package."""

from __future__ import annotations

from types import ModuleType

from ssbj.errors import DependencyError


def sqlglot() -> tuple[ModuleType, ModuleType]:
    """``(sqlglot, sqlglot.expressions)``, or :class:`DependencyError` naming the extra."""
    try:
        import sqlglot as sg
        from sqlglot import expressions as exp
    except ImportError as exc:  # pragma: no cover - the extra is installed in the dev env
        raise DependencyError("continuous queries need sqlglot: pip install 'ssbj[sql]'") from exc
    return sg, exp
