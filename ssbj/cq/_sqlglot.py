"""The one import of sqlglot (extra ``sql``) for the continuous-query package."""

from __future__ import annotations

from types import ModuleType

from ssbj.errors import DependencyError

_MODULES: tuple[ModuleType, ModuleType] | None = None


def sqlglot() -> tuple[ModuleType, ModuleType]:
    """``(sqlglot, sqlglot.expressions)``, or :class:`DependencyError` naming the extra."""
    global _MODULES
    if _MODULES is None:
        try:
            import sqlglot as sg
            from sqlglot import expressions as exp
        except ImportError as exc:  # pragma: no cover - the extra is installed in the dev env
            raise DependencyError("continuous queries need sqlglot: pip install 'ssbj[sql]'") from exc
        _MODULES = (sg, exp)
    return _MODULES
