"""The shard plan of a job whose join runs in the executors: P and the router, fixed for the checkpoint's life.

The plan is made once, by the driver, at the first start of a checkpoint, and saved as
``<checkpoint>/shards/plan.json``; every restart reads it back, because the shards'
checkpoints, the master shares and the warehouse's segment numbers all depend on it. A
job file that asks for another P or router than the saved plan is a configuration error
(start from a new checkpoint to change them).

Router choice (``join.shard_router: auto``), cheapest database work first (docs/sharding.md):

* ``range``: an integer join key that is the master's page column (by default its primary
  key): each shard's partitions are index ranges of its own key range, |R| rows read per
  R-cycle over all shards; bounds at the key's row quantiles, read with keyset queries;
* ``mod``: an integer key that is not the page column: ``((key % P) + P) % P = s`` pushed
  down; each shard's statement scans its page ranges and keeps 1/P of the rows;
* ``hash``: any key: each shard reads every partition of R and keeps its rows (P x |R|
  rows read per R-cycle).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ssbj.adapters.master_sql import SqlMasterScan
from ssbj.config import JobConfig
from ssbj.core.keys import key_family
from ssbj.core.shards import HashRouter, ModRouter, RangeRouter, Router
from ssbj.credentials import engine
from ssbj.errors import CheckpointError, ConfigError

PLAN_VERSION = 1


@dataclass(frozen=True)
class ShardPlan:
    """P, the router's kind and (range) bounds."""

    shards: int
    router: str  # "range" | "mod" | "hash"
    bounds: tuple[int, ...] = ()

    def make_router(self) -> Router:
        """Return the router."""
        if self.router == "range":
            return RangeRouter(self.bounds)
        if self.router == "mod":
            return ModRouter(self.shards)
        return HashRouter(self.shards)

    def to_json(self) -> dict[str, Any]:
        """Return the plan as saved."""
        return {"version": PLAN_VERSION, "shards": self.shards, "router": self.router, "bounds": list(self.bounds)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ShardPlan:
        """Inverse of :meth:`to_json`."""
        try:
            if d["version"] != PLAN_VERSION:
                raise ValueError(f"version {d['version']!r}")
            plan = cls(int(d["shards"]), str(d["router"]), tuple(int(b) for b in d["bounds"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"bad shard plan: {exc}") from None
        if plan.router not in ("range", "mod", "hash") or plan.shards < 1:
            raise CheckpointError(f"bad shard plan: {d!r:.200}")
        return plan


def shards_root(cfg: JobConfig) -> Path:
    """Where the shard plan and the shards' checkpoints live."""
    return Path(cfg.checkpoint) / "shards"


def saved(cfg: JobConfig) -> ShardPlan | None:
    """Return the checkpoint's plan, checked against the job file; None before the first start."""
    path = shards_root(cfg) / "plan.json"
    if path.exists():
        plan = ShardPlan.from_json(json.loads(path.read_text()))
        want = cfg.join.shards
        if want is not None and want != plan.shards:
            raise ConfigError(
                f"join.shards is {want} but the checkpoint {cfg.checkpoint} was made with {plan.shards} shards; "
                "start from a new checkpoint to change P"
            )
        if cfg.join.shard_router not in ("auto", plan.router):
            raise ConfigError(
                f"join.shard_router is {cfg.join.shard_router!r} but the checkpoint {cfg.checkpoint} was made "
                f"with {plan.router!r}; start from a new checkpoint to change it"
            )
        return plan
    return None


def load_or_create(cfg: JobConfig, default_shards: int) -> ShardPlan:
    """Return the saved plan (checked against the job file) or make, save and return a new one."""
    plan = saved(cfg)
    if plan is not None:
        return plan
    plan = choose(cfg, cfg.join.shards or max(1, default_shards))
    path = shards_root(cfg) / "plan.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(plan.to_json()))
    os.replace(tmp, path)
    return plan


def describe(cfg: JobConfig) -> str:
    """One line for ``ssbj validate``: the saved plan, or the plan a first start would make."""
    plan = saved(cfg)
    if plan is None:
        p = cfg.join.shards
        plan = choose(cfg, p or 2)
        how = f"P = {p}" if p else "P = Spark's default parallelism at the first start (2 shown)"
        made = "to be made at the first start"
    else:
        how, made = f"P = {plan.shards}", f"saved in {shards_root(cfg)}"
    bounds = f", bounds {list(plan.bounds)}" if plan.bounds else ""
    reads = "all of R per shard" if plan.router == "hash" else "its share of R per shard"
    return f"shards: join in the executors, {how}, {plan.router} router on {cfg.master.key}{bounds} ({reads}); {made}"


def choose(cfg: JobConfig, shards: int) -> ShardPlan:
    """Pick the router for ``cfg`` (``join.shard_router``) and compute range bounds from the master table."""
    m = cfg.master
    scan = SqlMasterScan(engine(m), m.table, m.key, 1 << 30, columns=[m.key], page_column=m.page_column)
    integer = key_family(scan.schema.field(m.key).type) == "integer"
    kind = cfg.join.shard_router
    if kind == "auto":
        kind = "hash" if not integer else "range" if scan.page_column == m.key else "mod"
    if kind in ("range", "mod") and not integer:
        raise ConfigError(f"join.shard_router {kind!r} needs an integer master.key; {m.key!r} is not")
    if kind == "range" and scan.page_column != m.key:
        raise ConfigError(
            f"join.shard_router 'range' needs master.key {m.key!r} to be the page column ({scan.page_column!r}): "
            "a unique indexed column whose ranges the database reads directly"
        )
    if kind != "range" or shards == 1:
        return ShardPlan(shards, kind)
    n = scan.count_rows()
    quantiles = SqlMasterScan(
        engine(m), m.table, m.key, max(1, math.ceil(n / shards)), columns=[m.key], page_column=m.key
    ).layout()["bounds"]
    # the layout's bounds are inclusive upper bounds of ranges; the router's are exclusive
    bounds: list[int] = []
    for b in (int(q["v"]) + 1 for q in quantiles[: shards - 1]):
        bounds.append(b if not bounds or b > bounds[-1] else bounds[-1] + 1)
    while len(bounds) < shards - 1:  # fewer rows than shards: empty shards at the top
        bounds.append((bounds[-1] if bounds else 0) + 1)
    return ShardPlan(shards, "range", tuple(bounds))
