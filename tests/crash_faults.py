"""Simulated process deaths at the processors' crash points (``ssbj.pipeline.faults``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ssbj.core.checkpoint import DirectoryStore
from ssbj.pipeline import faults, lifecycle


class Crash(Exception):
    """The process died here."""


@contextmanager
def armed_crashes(crashes: dict[int, str]) -> Iterator[dict[tuple[str, int], bool]]:
    """Arm one crash per batch id: ``after-decode``, ``after-sink``, ``in-checkpoint`` or ``after-checkpoint``.

    ``replay`` entries are left to the caller (a retried batch in the same process). Yields
    the crashes not yet fired, so a test can check that every planned crash happened.
    """
    armed = {(p, b): True for b, p in crashes.items() if p != "replay"}

    def crash_point(point: str, batch_id: int) -> None:
        if armed.pop((point, batch_id), False):
            raise Crash(point)

    class CrashingStore(DirectoryStore):
        def write_manifest(self, checkpoint_id: int, manifest: dict[str, Any]) -> None:
            raise Crash("in-checkpoint")

    def store_for(store: DirectoryStore, batch_id: int) -> DirectoryStore:
        if armed.pop(("in-checkpoint", batch_id), False):
            return CrashingStore(store.path, store.retain)
        return store

    saved = faults.crash_point, faults.store_for
    faults.crash_point, faults.store_for = crash_point, store_for  # type: ignore[assignment]
    try:
        yield armed
    finally:
        faults.crash_point, faults.store_for = saved  # type: ignore[assignment]
        assert lifecycle.faults is faults  # the processors crash where the tests arm it
