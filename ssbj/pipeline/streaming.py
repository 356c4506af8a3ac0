"""What every kind of job does with Spark's streaming query: start it, and publish its progress."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ssbj.config import Trigger

ProgressCallback = Callable[[dict[str, Any]], None]


def start_foreach_batch(
    frame: Any, handler: Callable[[Any, int], None], checkpoint: str | Path, name: str, trigger: Trigger
) -> Any:
    """Start ``frame``'s streaming query with ``handler`` per micro-batch; return the query."""
    writer = frame.writeStream.foreachBatch(handler).option("checkpointLocation", str(checkpoint)).queryName(name)
    if trigger.mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=trigger.interval)
    return writer.start()


def publish_progress(path: Path, progress: dict[str, Any], callback: ProgressCallback | None) -> None:
    """Replace ``path`` (``last_progress.json``) atomically with ``progress``; hand it to ``callback``."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(progress, default=float, indent=1))
    os.replace(tmp, path)
    if callback:
        callback(progress)
