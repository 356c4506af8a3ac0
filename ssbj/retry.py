"""The one retry policy: exponential backoff for databases, the broker and query restarts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ssbj.errors import ConfigError, TransientError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: ``attempts`` tries; waits start at ``initial_backoff`` s, doubling up to ``max_backoff``."""

    attempts: int = 5
    initial_backoff: float = 0.5
    max_backoff: float = 10.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"retry attempts must be >= 1, got {self.attempts}")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ConfigError(
                f"retry backoff must satisfy 0 <= initial ({self.initial_backoff}) <= max ({self.max_backoff})"
            )

    def delays(self) -> list[float]:
        """Return the waits between consecutive attempts (``attempts - 1`` of them)."""
        out: list[float] = []
        d = self.initial_backoff
        for _ in range(self.attempts - 1):
            out.append(d)
            d = min(d * 2, self.max_backoff)
        return out

    def delay(self, attempt: int) -> float:
        """Return the wait after failed attempt ``attempt`` (1-based)."""
        return float(min(self.max_backoff, self.initial_backoff * 2.0 ** min(attempt - 1, 60)))


def with_retries(
    call: Callable[[], T],
    retry: RetryPolicy,
    transient: Callable[[Exception], bool],
    label: str,
    logger: logging.Logger,
    *,
    detail: Callable[[Exception], str] = str,
    last_error: Callable[[Exception], str] | None = None,
    on_failure: Callable[[], None] | None = None,
    give_up: Callable[[int, Exception], Exception] | None = None,
) -> T:
    """Return ``call()``, retried with backoff while it fails with a ``transient`` error.

    Other errors propagate as they are. After each transient failure ``on_failure`` runs
    (to drop a broken client, say) and the retry is logged with ``detail(error)``. After the
    last attempt ``give_up(attempts, error)`` is raised, by default a :class:`TransientError`
    naming ``label``.
    """
    delays = retry.delays()
    t0 = time.monotonic()
    for attempt in range(1, retry.attempts + 1):
        try:
            return call()
        except Exception as e:
            if not transient(e):
                raise
            if on_failure is not None:
                on_failure()
            if attempt == retry.attempts:
                if give_up is not None:
                    raise give_up(attempt, e) from e
                raise TransientError(
                    f"{label} failed {attempt} times in {time.monotonic() - t0:.1f} s; "
                    f"last error {(last_error or detail)(e)}"
                ) from e
            logger.warning(
                "%s: attempt %d of %d failed with %s; retrying in %.2f s",
                label,
                attempt,
                retry.attempts,
                detail(e),
                delays[attempt - 1],
            )
            time.sleep(delays[attempt - 1])
    raise AssertionError("unreachable")  # pragma: no cover
