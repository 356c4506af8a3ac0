"""``njit`` whose on-disk cache is keyed by every compiled module's source, not only the function's own.

Numba's cache (``cache=True``) is stale when the function's *own* file changes, and only
then. Our kernels inline helpers from other modules (``ix_find`` of
:mod:`ssbj.core.hsindex` lives compiled inside the disk phase's probe), so an edit to a
helper left callers running the old helper from the cache: a measurement of a changed
index ran half the old code (found 2026-11-29 on a Robin Hood order of H_S's index, which
an earlier session had measured 4.3x slower for an unexplained cause). Here every cached
kernel of the package lives in a directory named after a hash of all the package's
sources that compile with numba, so any change to any of them starts a fresh cache.

The directory is ``numba-<hash>`` under numba's ``CACHE_DIR`` when one is set, else under
the package's ``__pycache__`` (older versions' directories there are removed an hour after
their last write); where it cannot be written numba falls back to its own locations.
Numba's setting is changed only while a kernel is decorated.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, overload

import numba
from numba.core import config

F = TypeVar("F", bound=Callable[..., Any])
PACKAGE = Path(__file__).resolve().parent.parent  # ssbj/
PREFIX = "numba-"
STALE_SECONDS = 3600.0  # an older version's directory is removed this long after its last write


@cache
def sources_digest() -> str:
    """Hash of every module of the package that compiles with numba (path and text)."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_bytes()
        if b"njit" in text:
            h.update(path.relative_to(PACKAGE).as_posix().encode())
            h.update(text)
    return h.hexdigest()[:16]


@cache
def cache_dir() -> str:
    """Directory of this source version's kernels (stale siblings of older versions in ``__pycache__`` are removed)."""
    user = getattr(config, "CACHE_DIR", "")  # (numba's config module sets its names at run time)
    own = not user
    base = PACKAGE / "__pycache__" if own else Path(user)
    target = base / f"{PREFIX}{sources_digest()}"
    if own and not target.exists() and base.is_dir():
        now = time.time()
        for old in base.glob(f"{PREFIX}*"):
            # best effort, and only an hour after its last write: a process of the older
            # sources may still run, and numba fails when its directory vanishes under a save
            with contextlib.suppress(OSError):
                if now - old.stat().st_mtime > STALE_SECONDS:
                    shutil.rmtree(old, ignore_errors=True)
    return str(target)


@contextlib.contextmanager
def _cache_dir() -> Iterator[None]:
    before = getattr(config, "CACHE_DIR", "")
    setattr(config, "CACHE_DIR", cache_dir())  # noqa: B010
    try:
        yield
    finally:
        setattr(config, "CACHE_DIR", before)  # noqa: B010


@overload
def njit(fn: F, /) -> F: ...
@overload
def njit(**kw: Any) -> Callable[[F], F]: ...
def njit(*args: Any, **kw: Any) -> Any:
    """:func:`numba.njit`, with ``cache=True`` kept in :func:`cache_dir`."""
    deco = numba.njit(**kw)

    def apply(fn: Any) -> Any:
        if not kw.get("cache"):
            return deco(fn)
        with _cache_dir():  # numba picks the cache's directory when the function is decorated
            return deco(fn)

    return apply(args[0]) if args else apply
