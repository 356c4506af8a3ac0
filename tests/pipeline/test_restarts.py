"""The one restart rule of every streaming job (ssbj.pipeline.restarts)."""

from __future__ import annotations

import logging

import pytest

from ssbj.errors import ServiceError, TransientError
from ssbj.logs import record_fields
from ssbj.pipeline.restarts import restart_delay
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
