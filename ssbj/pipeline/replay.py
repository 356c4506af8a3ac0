"""A replayed micro-batch: every processor goes back to the state before it the same way."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ssbj.core.checkpoint import DirectoryStore
from ssbj.logs import fields


def rollback_before(
    store: DirectoryStore,
    batch_id: int,
    restore: Callable[[int], None],
    fresh: Callable[[], None],
    log: logging.Logger,
) -> None:
    """Restore the newest checkpoint older than ``batch_id`` (``fresh`` state when there is none).

    Spark replays a batch whose commit it did not record; the processor may have
    checkpointed that batch (and later ones of a failed attempt) already.
    """
    older = [i for i in store.manifests() if i < batch_id]
    if older:
        restore(older[-1])
    else:
        fresh()
    restored = older[-1] if older else None
    log.info(
        "batch %d is a replay: restored checkpoint %s",
        batch_id,
        restored,
        extra=fields(event="replay", batch_id=batch_id, restored=restored),
    )
