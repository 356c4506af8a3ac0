"""A bounded input (a file replayed as a stream) fed so that every step finds a full chunk.

:meth:`SemiStreamJoin.run` steps as each batch arrives until the buffer is empty, which is
what a stream that arrives more slowly than the operator serves looks like. A file
replayed to measure the operator is the other case, the one the service rate is about:
tuples are always waiting. Stepping on a batch's remainder then enters a short chunk,
which holds one of H_S's k chunk places for a whole R-cycle: with batches of about k
chunks, MESHJOIN held 131,072 tuples an R-cycle at 10% of R where its ring had room for
160,000. :func:`replay` pushes batches until a step can fill its chunk
(:func:`appetite`), then steps once. The stream buffer (the arrival side, reported apart
from the operator's budget) then holds up to an appetite and a batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa

from ssbj.core.cachephase import hs_room

if TYPE_CHECKING:
    from ssbj.core.operator import SemiStreamJoin
    from ssbj.core.spec import StepResult

MIN_MISS_SHARE = 0.05  # a cache that answered nearly everything so far still leaves misses to expect
MARGIN = 1.1  # tuples over the expected need, so that the chunk, not the buffer, ends the step


def appetite(op: SemiStreamJoin) -> int:
    """Stream tuples one step may read: its chunk's room for misses over the share of tuples that miss.

    The share is the operator's own so far (served by the cache over tuples read); at most
    ``max_step_tuples``.
    """
    misses = min(float(hs_room(op)), (op._chunk_bytes + op._chunk_carry) / max(op._vs_avg, 1.0))
    read = op._c.tuples_in - op.buffered_tuples
    share = op._c.served_cache / read if read > 0 else 0.0
    want = MARGIN * misses / max(1.0 - share, MIN_MISS_SHARE) + 1
    return int(min(op.spec.max_step_tuples, want))


def replay(op: SemiStreamJoin, batches: Iterable[pa.Table | pa.RecordBatch]) -> Iterator[StepResult]:
    """Feed ``batches`` (a bounded input) with a full step always waiting, then drain."""
    it = iter(batches)
    more = True
    while more:
        while op.buffered_tuples < appetite(op):
            b = next(it, None)
            if b is None:
                more = False
                break
            op.push(b)
        if op.buffered_tuples:
            yield op.step()
    yield from op.drain()
