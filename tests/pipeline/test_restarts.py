"""The one restart rule of every streaming job (ssbj.pipeline.restarts)."""

from __future__ import annotations

import logging
import threading

import pytest

from ssbj.errors import ServiceError, TransientError
from ssbj.logs import record_fields
from ssbj.pipeline.restarts import RestartingJob, restart_delay, run_restarting
from ssbj.retry import RetryPolicy

POLICY = RetryPolicy(5, 0.5, 4.0)
LOG = logging.getLogger("ssbj.test.restarts")


def test_a_transient_cause_restarts_with_the_policy_delay(caplog: pytest.LogCaptureFixture) -> None:
    wrapped = RuntimeError("spark wrapping")
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        assert restart_delay(TransientError("db down"), wrapped, 0, 3, POLICY, LOG) == 0.5
        assert restart_delay(TransientError("db down"), wrapped, 2, 3, POLICY, LOG) == 2.0
    assert [record_fields(r)["attempt"] for r in caplog.records] == [1, 3]


def test_a_transient_cause_past_the_limit_is_raised_as_itself() -> None:
    cause = TransientError("db down")
    with pytest.raises(TransientError) as info:
        restart_delay(cause, RuntimeError("spark wrapping"), 3, 3, POLICY, LOG)
    assert info.value is cause


def test_a_terminal_cause_never_restarts() -> None:
    cause = ServiceError("access denied")
    with pytest.raises(ServiceError) as info:
        restart_delay(cause, RuntimeError("spark wrapping"), 0, 3, POLICY, LOG)
    assert info.value is cause


def test_any_other_failure_is_raised_as_the_query_raised_it() -> None:
    failure = RuntimeError("unexpected")
    with pytest.raises(RuntimeError) as info:
        restart_delay(failure, failure, 0, 3, POLICY, LOG)
    assert info.value is failure


class _Run:
    """An attempt that fails with the given errors, then succeeds; records what the loop did."""

    def __init__(self, *failures: Exception, recorded: BaseException | None = None) -> None:
        self.failures = list(failures)
        self.recorded = recorded
        self.log: list[str] = []

    def attempt(self) -> None:
        self.log.append("attempt")
        if self.failures:
            raise self.failures.pop(0)

    def go(self, stop: threading.Event | None = None, max_restarts: int = 3) -> int:
        return run_restarting(
            self.attempt,
            lambda: self.recorded,
            lambda: self.log.append("stop"),
            lambda: self.log.append("reset"),
            stop or threading.Event(),
            max_restarts,
            RetryPolicy(5, 0.0, 0.0),
            LOG,
        )


def test_run_restarting_stops_resets_and_retries_transient_failures() -> None:
    run = _Run(TransientError("broker down"), TransientError("broker down"))
    assert run.go() == 2
    assert run.log == ["attempt", "stop", "reset", "attempt", "stop", "reset", "attempt"]


def test_run_restarting_raises_a_terminal_failure_after_stopping_the_queries() -> None:
    run = _Run(RuntimeError("spark wrapping"), recorded=ServiceError("access denied"))
    with pytest.raises(ServiceError):
        run.go()
    assert run.log == ["attempt", "stop"]


def test_run_restarting_gives_up_after_max_restarts_and_ends_on_a_stop_request() -> None:
    run = _Run(*[TransientError("db down")] * 3)
    with pytest.raises(TransientError):
        run.go(max_restarts=2)
    assert run.log.count("attempt") == 3
    stop = threading.Event()
    stop.set()
    run = _Run(TransientError("db down"))
    assert run.go(stop) == 1
    assert run.log == ["attempt", "stop"]  # no reset, no second attempt


def test_a_restarting_job_raises_the_error_its_batch_recorded_and_stops_on_request() -> None:
    job = RestartingJob(max_restarts=3, restart_backoff=2.0)
    assert job.restart_policy == RetryPolicy(4, 2.0, 60.0)
    log: list[str] = []

    def attempt() -> None:
        log.append("attempt")
        job._error = ServiceError("access denied")  # what a batch function records; Spark wraps it
        raise RuntimeError("spark wrapping")

    with pytest.raises(ServiceError):
        job._run_restarting(attempt, lambda: log.append("stop"), lambda: log.append("reset"), LOG)
    assert log == ["attempt", "stop"]
    job._error = None
    job.stop()
    assert job.stop_event.is_set()
