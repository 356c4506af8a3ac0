"""When a failed streaming query is restarted: one rule for every kind of job.

Only a :class:`~ssbj.errors.TransientError` (a database or broker outage, a lost executor)
restarts the query, at most ``max_restarts`` times, after the retry policy's delay; the job
then reloads its committed state and Spark replays what was not committed.
:class:`RestartingJob` is what every streaming job keeps for that.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

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


def run_restarting(
    attempt: Callable[[], None],
    recorded: Callable[[], BaseException | None],
    stop_queries: Callable[[], None],
    reset: Callable[[], None],
    stop_event: threading.Event,
    max_restarts: int,
    policy: RetryPolicy,
    log: logging.Logger,
) -> int:
    """Run ``attempt`` (start the queries, wait for them, raise if one failed) until it ends cleanly.

    After a failure the queries are stopped; a transient one (``recorded()``, the error a
    batch function kept, else what ``attempt`` raised) restarts after the policy's delay
    with the committed state reloaded (``reset``); a stop request during the delay ends
    the run. Returns the restarts made.
    """
    restarts = 0
    while True:
        try:
            attempt()
            return restarts
        except Exception as exc:
            stop_queries()  # whether it restarts or not
            delay = restart_delay(recorded() or exc, exc, restarts, max_restarts, policy, log)
            restarts += 1
            if stop_event.wait(delay):
                return restarts
            reset()  # reload the committed state: the failed batch may have half-run


class RestartingJob:
    """What a streaming job keeps to restart its queries: the limit, the policy, the stop request, a batch's error.

    The job's batch function records what it raised in ``_error`` (Spark wraps it).
    """

    def __init__(self, max_restarts: int, restart_backoff: float) -> None:
        self.max_restarts = max_restarts
        # query restarts after an outage outlasted the adapters' own retries
        self.restart_policy = RetryPolicy(max_restarts + 1, restart_backoff, max(60.0, restart_backoff))
        self.stop_event = threading.Event()
        self._error: BaseException | None = None

    def _run_restarting(
        self,
        attempt: Callable[[], None],
        stop_queries: Callable[[], None],
        reset: Callable[[], None],
        log: logging.Logger,
    ) -> int:
        """:func:`run_restarting` with this job's recorded error, stop request, limit and policy."""
        return run_restarting(
            attempt,
            lambda: self._error,
            stop_queries,
            reset,
            self.stop_event,
            self.max_restarts,
            self.restart_policy,
            log,
        )

    def stop(self) -> None:
        """Ask the job to stop after the running batches (safe from a signal handler or another thread)."""
        self.stop_event.set()
