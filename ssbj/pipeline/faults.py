"""Crash points for the kill-and-restart tests.

``SSBJ_CRASH_AT=<point>:<batch id>`` kills the process with SIGKILL at that point of that
batch; unset (always, outside those tests) it does nothing.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from ssbj.core.checkpoint import DirectoryStore

POINTS = ("after-decode", "after-sink", "in-checkpoint", "after-checkpoint")


def armed(point: str, batch_id: int) -> bool:
    """Whether the process is asked to die at ``point`` of batch ``batch_id``."""
    spec = os.environ.get("SSBJ_CRASH_AT", "")
    name, _, bid = spec.partition(":")
    return name == point and bid.isdigit() and int(bid) == batch_id


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
