"""Crash points for the kill-and-restart tests.

``SSBJ_CRASH_AT=<point>:<batch id>[,<point>:<batch id>...]`` kills the process with SIGKILL
at that point of that batch; unset (always, outside those tests) it does nothing. With
``SSBJ_CRASH_ONCE=<dir>`` each point fires once in the whole job (a marker file in
``<dir>``): a Spark task retried after its Python worker was killed then goes through, as
the driver does after a restart.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from ssbj.core.checkpoint import DirectoryStore

POINTS = ("after-decode", "after-sink", "in-checkpoint", "after-checkpoint")


def armed(point: str, batch_id: int) -> bool:
    """Whether the process is asked to die at ``point`` of batch ``batch_id``."""
    for spec in os.environ.get("SSBJ_CRASH_AT", "").split(","):
        name, _, bid = spec.partition(":")
        if name == point and bid.isdigit() and int(bid) == batch_id:
            return _first_time(f"{point}-{batch_id}")
    return False


def _first_time(marker: str) -> bool:
    once = os.environ.get("SSBJ_CRASH_ONCE")
    if not once:
        return True
    try:  # O_EXCL: of two shards reaching the point together, one dies
        os.close(os.open(os.path.join(once, marker), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def crash_point(point: str, batch_id: int) -> None:
    """Die here if asked to (SIGKILL: no clean-up, no flush, like a lost machine)."""
    if armed(point, batch_id):
        os.kill(os.getpid(), signal.SIGKILL)


class CrashBeforeManifest(DirectoryStore):
    """A store that dies after writing a checkpoint's data files, before its manifest."""

    def write_manifest(self, checkpoint_id: int, manifest: dict[str, Any]) -> None:
        """Die instead of committing."""
        os.kill(os.getpid(), signal.SIGKILL)


def store_for(store: DirectoryStore, batch_id: int) -> DirectoryStore:
    """``store``, or a store that dies inside the checkpoint when ``in-checkpoint`` is armed."""
    if armed("in-checkpoint", batch_id):
        return CrashBeforeManifest(store.path, store.retain)
    return store
