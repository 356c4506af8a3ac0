"""Count the calls ``ssbj.core.lanes`` splits into slices (the tests of ``JoinSpec.threads``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from ssbj.core import lanes


@dataclass
class SlicedCalls:
    """How many ``lanes.run`` calls had more than one slice."""

    count: int = 0


def count_sliced_calls(monkeypatch: pytest.MonkeyPatch, min_slice: int) -> SlicedCalls:
    """Split calls of at least ``min_slice`` tuples a slice (small test streams), and count the split calls."""
    monkeypatch.setattr(lanes, "MIN_SLICE", min_slice)
    calls = SlicedCalls()
    run = lanes.run

    def counted(fn: Any, parts: list[tuple[int, int]]) -> Any:
        calls.count += len(parts) > 1
        return run(fn, parts)

    monkeypatch.setattr(lanes, "run", counted)
    return calls
