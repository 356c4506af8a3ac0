"""The running plan of a shared application, what it measures, and when it re-optimizes.

The application runs a :class:`~ssbj.shared.runplan.RunPlan` (:func:`ssbj.pipeline.shared_plan.plan_for`,
what ``ssbj plan --config`` prints). From its start, or its last re-optimization, it
measures per source the records per second of wall time, and per scan group the share of
its tuples that waited in H_S (the cache phase answered the rest). After
``shared.measure_calls`` calls, at the start of a call (a micro-batch boundary: the state
is the last checkpoint's), if a measurement has drifted more than ``shared.drift``
(relative) from what the plan assumed, the plan is re-solved at the measured values; when
the new plan runs otherwise (other groups, or a w or budget moved more than
``shared.drift``), the application switches to it as it does for added jobs: a new epoch
gets every tuple from then on while the old one drains beside it
(:class:`~ssbj.shared.epochs.EpochedSharedJoin`), so no output is lost or repeated. The
plan and its assumptions are in the checkpoint; the measurements start again after a
restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ssbj.logs import fields
from ssbj.shared.epochs import EpochedSharedJoin
from ssbj.shared.runplan import Assumed, RunPlan, differs, drift

log = logging.getLogger("ssbj.progress")


@dataclass
class Window:
    """Measurements since the plan was made (or the process started)."""

    started: float
    calls: int = 0
    records: dict[str, int] = field(default_factory=dict)  # source -> records
    base: dict[str, tuple[int, int]] = field(default_factory=dict)  # master -> (served, entered) at start


def group_counters(esj: EpochedSharedJoin) -> dict[str, tuple[int, int]]:
    """(tuples the cache answered, tuples that entered H_S) per master id, over the current epoch's groups."""
    out: dict[str, tuple[int, int]] = {}
    for g in esj.current.groups:
        s, e = out.get(g.master, (0, 0))
        out[g.master] = (s + g.served, e + g.entered)
    return out


def epoch_options(plan: RunPlan, algorithm: str, cost_model: Any) -> dict[str, Any]:
    """Return the options of a new epoch: the plan's groups, w and budgets (docs/shared.md)."""
    return {
        "algorithm": algorithm,
        "cost_model": cost_model,
        "step_rows": min(g.step_rows for g in plan.groups),  # every group has its own: see group_rows
        "memory_budget": None,
        **plan.options(),
    }


class PlanKeeper:
    """Holds the plan, the measurement window, and decides re-optimizations (module doc)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.plan: RunPlan | None = None
        self.window = Window(clock())
        self.replans = 0  # switches to a re-optimized plan, in this process

    def start(self, plan: RunPlan, esj: EpochedSharedJoin) -> None:
        """Run ``plan`` from now on; measurements start again."""
        self.plan = plan
        self.window = Window(self.clock(), base=group_counters(esj))

    def count(self, sid: str, records: int) -> None:
        """Count a call's records."""
        self.window.calls += 1
        self.window.records[sid] = self.window.records.get(sid, 0) + records

    def measured(self, esj: EpochedSharedJoin) -> Assumed:
        """Rates and waiting shares measured in the window."""
        w = self.window
        secs = max(self.clock() - w.started, 1e-6)
        assert self.plan is not None  # noqa: S101
        rates = {s: w.records.get(s, 0) / secs for s in self.plan.assumed.rates}
        waiting = {}
        for m, (served, entered) in group_counters(esj).items():
            s0, e0 = w.base.get(m, (0, 0))
            n = (served - s0) + (entered - e0)
            if n > 0:
                waiting[m] = (entered - e0) / n
        return Assumed(rates, waiting)

    def due(self, measure_calls: int) -> bool:
        """Whether the window holds enough calls to compare."""
        return self.plan is not None and self.window.calls >= measure_calls

    def replan(
        self, esj: EpochedSharedJoin, threshold: float, solve: Callable[[Assumed], RunPlan]
    ) -> tuple[RunPlan, list[str]] | None:
        """Return a plan to switch to if the measurements drifted and the re-solved plan runs otherwise; else None.

        When they drifted but the plan stays, the plan is kept with the measured values as its assumptions.
        """
        assert self.plan is not None  # noqa: S101
        got = self.measured(esj)
        why = drift(self.plan, got, threshold)
        if not why:
            return None
        new = solve(got)
        if not differs(self.plan, new, threshold):
            log.info(
                "measured values drifted (%s); re-solved plan is the same", "; ".join(why), extra=fields(event="replan")
            )
            p = self.plan
            kept = RunPlan(p.groups, p.budget, p.store_budget, got, p.predicted_scan_cpu)
            self.start(kept, esj)
            return None
        return new, why

    def meta(self) -> dict[str, Any]:
        """Return the plan for the checkpoint's meta."""
        return {} if self.plan is None else {"plan": self.plan.to_dict()}
