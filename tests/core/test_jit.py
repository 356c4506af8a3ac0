"""Kernels' on-disk cache keyed by every compiled module's source (ssbj.core.jit)."""

from __future__ import annotations

from pathlib import Path

import pytest
from numba.core import config

from ssbj.core import jit


def _digest_of(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(jit, "PACKAGE", tmp)
    jit.sources_digest.cache_clear()
    try:
        return jit.sources_digest()
    finally:
        jit.sources_digest.cache_clear()


def test_the_digest_follows_every_compiled_module_and_only_those(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "core").mkdir()
    helper = tmp_path / "core" / "helper.py"
    helper.write_text("from ssbj.core.jit import njit\n@njit(cache=True, inline='always')\ndef f(x): return x\n")
    (tmp_path / "core" / "caller.py").write_text("from ssbj.core.jit import njit\n")
    plain = tmp_path / "plain.py"
    plain.write_text("x = 1\n")
    first = _digest_of(tmp_path, monkeypatch)
    plain.write_text("x = 2\n")  # no kernel in it: the kernels' cache stays
    assert _digest_of(tmp_path, monkeypatch) == first
    helper.write_text(helper.read_text().replace("return x", "return x + 1"))  # a helper others inline
    assert _digest_of(tmp_path, monkeypatch) != first


def test_a_cached_kernel_lives_in_the_versioned_directory_and_numba_is_left_as_it_was() -> None:
    before = getattr(config, "CACHE_DIR", "")

    @jit.njit(cache=True)
    def twice(x: int) -> int:
        return 2 * x

    assert twice(21) == 42
    assert getattr(config, "CACHE_DIR", "") == before
    where = Path(twice._cache._cache_path)  # numba's locator, chosen when the kernel was decorated
    assert where.is_relative_to(Path(jit.cache_dir()))
    assert Path(jit.cache_dir()).name == f"numba-{jit.sources_digest()}"


def test_an_uncached_kernel_is_plain_numba() -> None:
    @jit.njit
    def inc(x: int) -> int:
        return x + 1

    assert inc(1) == 2
    assert not hasattr(inc._cache, "_cache_path")  # numba's NullCache


def test_older_versions_directories_go_an_hour_after_their_last_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import time

    cache = tmp_path / "__pycache__"
    stale, recent = cache / "numba-0000000000000000", cache / "numba-1111111111111111"
    for d in (stale, recent):
        d.mkdir(parents=True)
    hours_ago = time.time() - 2 * 3600
    os.utime(stale, (hours_ago, hours_ago))
    monkeypatch.setattr(jit, "PACKAGE", tmp_path)
    monkeypatch.setattr(config, "CACHE_DIR", "")
    jit.sources_digest.cache_clear()
    jit.cache_dir.cache_clear()
    try:
        assert Path(jit.cache_dir()).parent == cache
        assert not stale.exists()  # nobody wrote there for two hours
        assert recent.exists()  # a process of those sources may still be running
    finally:
        jit.sources_digest.cache_clear()
        jit.cache_dir.cache_clear()
