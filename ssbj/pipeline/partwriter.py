"""Write a micro-batch's output while the join still computes it: the sink's transaction runs in a thread.

The processor hands each step's output to :class:`PartWriter` as the step finishes; the
sink's ``write_parts`` (one transaction: delete the (batch, segment), load the parts,
commit) consumes them in a thread, so the database loads rows while the next steps join.
Exactly once is the sink's rule unchanged: nothing of the (batch, segment) is visible
before the commit, and a batch that fails before :meth:`PartWriter.finish` rolls back.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, Protocol

import pyarrow as pa

from ssbj.errors import StateError

_END = "end"
_ABORT = "abort"


class PartsSink(Protocol):
    """A sink that can load one (batch, segment) from parts arriving over time (``SqlTableSink``)."""

    overlap: bool  # whether the job asked for it (sink.overlap)

    def write_parts(self, batch_id: int, segment: int, parts: Iterator[pa.Table]) -> None:
        """Replace the rows of (batch_id, segment) by the parts, atomically."""
        ...


def parts_sink(sink: Any) -> PartsSink | None:
    """``sink`` if it loads parts and was asked to, else None (the whole table is written after the join)."""
    return sink if callable(getattr(sink, "write_parts", None)) and getattr(sink, "overlap", False) else None


class PartWriter:
    """One (batch, segment) written by a thread from the parts :meth:`put` hands it."""

    def __init__(self, sink: PartsSink, batch_id: int, segment: int) -> None:
        self._q: queue.SimpleQueue[pa.Table | str] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self.rows = 0
        self._thread = threading.Thread(
            target=self._run, args=(sink, batch_id, segment), name=f"ssbj-sink-{batch_id}.{segment}", daemon=True
        )
        self._thread.start()

    def _parts(self) -> Iterator[pa.Table]:
        while True:
            item = self._q.get()
            if isinstance(item, str):
                if item == _ABORT:  # the batch failed: the sink's transaction rolls back
                    raise StateError("the micro-batch failed before its output was complete")
                return
            yield item

    def _run(self, sink: PartsSink, batch_id: int, segment: int) -> None:
        try:
            sink.write_parts(batch_id, segment, self._parts())
        except BaseException as exc:  # handed to the processor's thread in finish()
            self._error = exc

    def put(self, table: pa.Table) -> None:
        """Hand over the next part (may be empty)."""
        self.rows += table.num_rows
        self._q.put(table)

    def finish(self) -> None:
        """Wait until the sink committed every part; raise what the sink raised."""
        self._q.put(_END)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Roll the write back (after a failure in the processor) and wait for the thread."""
        self._q.put(_ABORT)
        self._thread.join()
