"""When a failed streaming query is restarted: one rule for every kind of job.

Only a :class:`~ssbj.errors.TransientError` (a database or broker outage, a lost executor)
restarts the query, at most ``max_restarts`` times, after the retry policy's delay; the job
then reloads its committed state and Spark replays what was not committed.
"""

from __future__ import annotations

import logging

from ssbj.errors import TerminalError, TransientError
from ssbj.logs import fields
from ssbj.retry import RetryPolicy


def restart_delay(
    cause: BaseException,
    failure: Exception,
    restarts: int,
    max_restarts: int,
    policy: RetryPolicy,
    log: logging.Logger,
) -> float:
    """Seconds to wait before restart ``restarts + 1``, or raise when the query may not restart.

    ``cause`` is what went wrong (an error the batch function recorded, or ``failure``, what
    the query raised): an SSBJError is raised as itself, without Spark's wrapping, anything
    else as ``failure``.
    """
    if not isinstance(cause, TransientError) or restarts >= max_restarts:
        if isinstance(cause, TerminalError | TransientError):
            raise cause from None
        raise failure
    attempt = restarts + 1
    delay = policy.delay(attempt)
    log.warning(
        "query failed (%s); restart %d in %.1f s",
        cause,
        attempt,
        delay,
        extra=fields(event="restart", attempt=attempt, in_seconds=delay, error=str(cause)),
    )
    return delay
