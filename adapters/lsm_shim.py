"""The one import of rocksdict (extra ``lsm``): a clear error when it is not installed."""

from __future__ import annotations

from types import ModuleType

from ssbj.errors import DependencyError


def rocksdict() -> ModuleType:
    """Return the rocksdict module, or :class:`DependencyError` naming the extra that provides it."""
    try:
        import rocksdict as mod
    except ImportError as exc:
        raise DependencyError(
            "the LSM-tree waiting store needs rocksdict: install the 'lsm' extra (pip install 'ssbj[lsm]')"
        ) from exc
    return mod
