"""The plan a shared application runs: the ILP's sharing, and one memory budget split by it.

:func:`run_plan` solves the sharing ILP (:func:`ssbj.shared.model.optimize`, one shard:
the application joins on the driver) and turns each chosen store into a *scan group* of
the shared operator: its jobs, its step size w (tuples of each of its streams per step)
and its memory budget. ``ssbj plan --config ...`` prints this plan and ``ssbj run
--config ...`` runs it (the groups, w and budgets are the epoch's options).

**The split** (Eq. 1-2 of the operator's cost model). A group g of ``n_g`` streams with
total rate ``L_g`` reading a master of ``k_g`` partitions of ``b_g`` rows needs

* fixed bytes ``A_g = b_g (v_R + DISK_ROW_OVERHEAD)`` (its disk buffer),
* per unit of w: ``k_g n_g f_g (row_g + HS_TUPLE_OVERHEAD)`` in H_S (``f_g`` the share of
  its tuples that wait there, 1 - the cache's hit share; ``row_g`` the key and row id, or
  the whole row when its stream is kept inline) and ``(k_g + 1) v_S`` per stream it reads
  from the stream store (the store keeps a row until the R-cycle of each group that took
  it has finished; charging every group its window is an upper bound),

and its scan costs ``L_g / (n_g w_g) x (c_fixed + b_g (c_io + c_h + c_b))`` core-seconds
per second (Eq. 2's per-step terms; the per-tuple terms do not depend on w). Minimizing
the sum of the scans' costs within the budget ``B`` (less the operator's reserve share)
has the closed form ``w_g ~ sqrt(L_g F_g / (n_g a_g))`` scaled to fill the budget
(Lagrange). Each group's operator gets its bytes as its ``memory_budget`` (the core adapts
H_S to it at real nbytes); the stream store's share is the sum of the windows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ssbj.core.costmodel import DISK_ROW_OVERHEAD, HS_TUPLE_OVERHEAD, RESERVE_SHARE, CostModel
from ssbj.errors import ConfigError
from ssbj.shared.model import NARROW_ROW, JobSketch, SharingPlan, optimize, store_rows

MIN_WAITING = 0.05  # a waiting share below this counts as this (drift is relative)


@dataclass(frozen=True)
class GroupPlan:
    """One scan group of the plan."""

    master: str
    jobs: list[str]
    streams: list[str]
    inline: bool  # its one stream's rows are kept in its H_S, not in the stream store
    step_rows: int  # w: tuples of each of its streams per step
    budget: int | None  # bytes of its operator (None: no budget, fixed w)
    store_bytes: int  # predicted bytes of the stream-store rows it keeps
    partition_rows: int | None = None  # b of its scan (None: a plan checkpointed before it was kept)


@dataclass(frozen=True)
class Assumed:
    """The rates and waiting shares a plan is made for (measured ones once there are)."""

    rates: dict[str, float]  # stream -> tuples/s
    waiting: dict[str, float] = field(default_factory=dict)  # master id -> share of tuples entering H_S


@dataclass
class RunPlan:
    """What the application runs: the groups, their w and budgets, and what was assumed."""

    groups: list[GroupPlan]
    budget: int | None  # the application's budget (shared.memory)
    store_budget: int  # predicted stream-store bytes
    assumed: Assumed
    predicted_scan_cpu: float  # core-s/s of the groups' scans at the chosen w
    sharing: SharingPlan | None = None  # the ILP's answer (not kept in checkpoints)

    def options(self) -> dict[str, Any]:
        """Return the shared operator's options for this plan (JSON-able: checkpointed with the epoch)."""
        return {
            "groups": [g.jobs for g in self.groups],
            "group_rows": [g.step_rows for g in self.groups],
            "group_budgets": [g.budget for g in self.groups],
        }

    def to_dict(self) -> dict[str, Any]:
        """Return the plan as JSON (checkpoint meta, ``ssbj plan --json``)."""
        return {
            "groups": [asdict(g) for g in self.groups],
            "budget": self.budget,
            "store_budget": self.store_budget,
            "assumed": asdict(self.assumed),
            "predicted_scan_cpu": self.predicted_scan_cpu,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunPlan:
        """Return the plan :meth:`to_dict` wrote."""
        a = d["assumed"]
        return cls(
            groups=[GroupPlan(**g) for g in d["groups"]],
            budget=d["budget"],
            store_budget=int(d["store_budget"]),
            assumed=Assumed(
                {k: float(v) for k, v in a["rates"].items()}, {k: float(v) for k, v in a["waiting"].items()}
            ),
            predicted_scan_cpu=float(d["predicted_scan_cpu"]),
        )


def run_plan(
    jobs: list[JobSketch],
    assumed: Assumed,
    budget: int | None,
    model: CostModel | None = None,
    step_cap: int | None = None,
    fallback_budget: int | None = None,
    scan_rows: dict[str, int] | None = None,
) -> RunPlan:
    """Solve the sharing ILP for ``jobs`` at ``assumed`` rates and split ``budget`` among its groups.

    Without a budget every group runs with the jobs' own w (``JobSketch.step_rows``, the
    smallest of the group's) and ``fallback_budget`` for its operator (the core adapts w
    to it). ``step_cap`` bounds every w (the jobs' ``join.step_rows``). ``scan_rows``: b of
    each master's scan (:func:`ssbj.shared.model.store_rows`).
    """
    model = model or CostModel()
    rated = [_with_rate(j, assumed.rates.get(j.stream, j.rate)) for j in jobs]
    sharing = optimize(rated, model, capacity=None, shards=(1,), scan_rows=scan_rows)
    by_name = {j.name: j for j in rated}
    readers: dict[str, int] = {}
    for s in sharing.stores:
        for st in {by_name[n].stream for n in s["jobs"]}:  # type: ignore[attr-defined]
            readers[st] = readers.get(st, 0) + 1
    k = model.k
    rows: list[dict[str, Any]] = []
    for s in sorted(sharing.stores, key=lambda s: (str(s["master"]), sorted(s["jobs"]))):  # type: ignore[call-overload]
        mj = [by_name[n] for n in s["jobs"]]  # type: ignore[attr-defined]
        streams = list(dict.fromkeys(j.stream for j in mj))
        inline = len(streams) == 1 and readers[streams[0]] == 1
        v_s = {j.stream: j.v_s for j in mj}
        b = store_rows(mj, scan_rows)
        parts = -(-max(j.master_rows for j in mj) // b)
        v_r = sum({j.v_r for j in mj})
        f = max(assumed.waiting.get(str(s["master"]), 1.0), MIN_WAITING)
        row = (NARROW_ROW + 8 + v_s[streams[0]]) if inline else NARROW_ROW
        hs_unit = parts * len(streams) * f * (row + HS_TUPLE_OVERHEAD)
        store_unit = 0.0 if inline else (parts + 1) * sum(v_s.values())
        rate = sum(max(assumed.rates.get(st, mj[0].rate), 1.0) for st in streams)
        fixed_scan = 1e-9 * (k.c_fixed + b * (k.c_io_row + k.c_h + k.c_b))
        rows.append(
            {
                "store": s,
                "jobs": sorted(str(n) for n in s["jobs"]),  # type: ignore[attr-defined]
                "streams": streams,
                "inline": inline,
                "fixed": b * (v_r + DISK_ROW_OVERHEAD),
                "hs_unit": hs_unit,
                "store_unit": store_unit,
                "weight": rate * fixed_scan / len(streams),  # scan cost per second = weight / w
                "own_w": min(j.step_rows for j in mj),
                "b": b,
            }
        )
    own = [min(r["own_w"], step_cap or r["own_w"]) for r in rows]
    ws = own if budget is None else _split(rows, budget, step_cap)
    groups = []
    for r, w in zip(rows, ws, strict=True):
        own_bytes = math.ceil((r["fixed"] + r["hs_unit"] * w) / (1 - RESERVE_SHARE))
        grp_budget = fallback_budget if budget is None else own_bytes
        groups.append(
            GroupPlan(
                master=str(r["store"]["master"]),
                jobs=r["jobs"],
                streams=r["streams"],
                inline=r["inline"],
                step_rows=int(w),
                budget=grp_budget,
                store_bytes=int(r["store_unit"] * w),
                partition_rows=r["b"],
            )
        )
    return RunPlan(
        groups=groups,
        budget=budget,
        store_budget=sum(g.store_bytes for g in groups),
        assumed=assumed,
        predicted_scan_cpu=sum(r["weight"] / w for r, w in zip(rows, ws, strict=True)),
        sharing=sharing,
    )


def _split(rows: list[dict[str, Any]], budget: int, cap: int | None) -> list[int]:
    """Return w per group minimizing sum(weight / w) within the budget (module doc); ConfigError if it cannot fit."""
    scale = 1 - RESERVE_SHARE
    fixed = sum(r["fixed"] / scale for r in rows)
    units = [r["hs_unit"] / scale + r["store_unit"] for r in rows]
    left = budget - fixed
    need = fixed + sum(units)  # w = 1 everywhere
    if left <= 0 or need > budget:
        raise ConfigError(
            f"shared.memory {budget:,} bytes is too small for this plan: its disk buffers alone need "
            f"{fixed:,.0f} bytes and one tuple per step {need:,.0f}; raise it or lower master.partition_rows"
        )
    shape = [math.sqrt(r["weight"] / u) for r, u in zip(rows, units, strict=True)]
    t = left / sum(u * s for u, s in zip(units, shape, strict=True))
    return [max(1, min(int(t * s), cap or int(t * s))) for s in shape]


def _with_rate(j: JobSketch, rate: float) -> JobSketch:
    return JobSketch(**{**j.__dict__, "rate": max(rate, 1.0)})


def drift(plan: RunPlan, measured: Assumed, threshold: float) -> list[str]:
    """Return why ``measured`` has drifted beyond ``threshold`` (relative) from what ``plan`` assumed."""
    why = []
    for s, a in plan.assumed.rates.items():
        m = measured.rates.get(s)
        if m is not None and abs(m - a) > threshold * max(a, 1.0):
            why.append(f"rate of {s}: {m:,.0f}/s against {a:,.0f}/s assumed")
    for g in plan.groups:
        a = max(plan.assumed.waiting.get(g.master, 1.0), MIN_WAITING)
        m = measured.waiting.get(g.master)
        if m is not None and abs(max(m, MIN_WAITING) - a) > threshold * a:
            why.append(f"waiting share of {g.master}: {m:.2f} against {a:.2f} assumed")
    return why


def differs(a: RunPlan, b: RunPlan, threshold: float) -> bool:
    """Whether ``b`` runs otherwise than ``a``: other groups, or a w or budget moved beyond ``threshold``."""
    if [g.jobs for g in a.groups] != [g.jobs for g in b.groups]:
        return True
    for ga, gb in zip(a.groups, b.groups, strict=True):
        if abs(gb.step_rows - ga.step_rows) > threshold * ga.step_rows:
            return True
        if (ga.budget is None) != (gb.budget is None):
            return True
        if ga.budget is not None and gb.budget is not None and abs(gb.budget - ga.budget) > threshold * ga.budget:
            return True
    return False
