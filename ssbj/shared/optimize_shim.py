"""The one import of the ``optimize`` extra (scipy's HiGHS MILP)."""

from __future__ import annotations

from typing import Any

from ssbj.errors import DependencyError


def milp_solver() -> Any:
    """Return ``scipy.optimize`` (milp, LinearConstraint, Bounds); DependencyError naming the extra."""
    try:
        import scipy.optimize as so
        import scipy.sparse  # noqa: F401  (the constraint matrix is sparse)
    except ImportError as exc:
        raise DependencyError(f"the shared-jobs optimizer needs scipy (pip install 'ssbj[optimize]'): {exc}") from exc
    return so
