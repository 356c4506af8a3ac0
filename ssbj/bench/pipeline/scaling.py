"""A scaling model of the executor placement, fitted on one P = 1 and one P = 2 run of ``ssbj_exec``.

Over a run (N tuples, P shards on C cores, S source partitions):

    wall(P) = other + spark + S1 / min(C, S) + waves(P) * (a + b * P) / P
    waves(P) = ceil(P / C)

* ``S1``: stage-1 busy seconds (source read + decode + routing), summed over the source tasks;
* ``a + b * P``: the shards' task seconds summed over shards: ``a`` is the work that splits
  over shards (join, write, checkpoint of the rows), ``b`` what every shard pays per
  micro-batch whatever its share (restore, its own steps' fixed cost, its own sink
  transaction and checkpoint); fitted from the two runs;
* ``spark``: the driver's wall per micro-batch minus stages 1 and 2 (scheduling, shuffle,
  collecting the summaries), measured at P = 1 and held constant;
* ``other``: the run's wall outside the micro-batches (query start, drain decision).

The database is the other limit: the run reads ``r(P)`` master rows per stream tuple
(measured at P = 1 and 2; a range router reads each row once per R-cycle over all shards)
at ``D`` rows/s per reading shard (measured: master rows read / shard join seconds is a
lower bound, as the join seconds include the probe), so tuples/s <= D * min(P, C_db) / r(P).

Run: ``python -m ssbj.bench.pipeline.scaling RESULTS_DIR [--cores 2] [--sources 2]`` on a
directory written by ``python -m ssbj.bench.pipeline --shards 1 2`` (subfolders ``*-p1`` and
``*-p2``); it prints the fitted terms, the measured and predicted walls, and a predicted
curve for P = 1..32 with as many cores (and source partitions) as shards.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    """What the model needs from one ``ssbj_exec`` result."""

    shards: int
    tuples: int
    wall: float
    driver_wall: float  # summed over micro-batches
    stage1: float  # summed over source tasks
    shard_tasks: float  # summed over shards
    rows_per_tuple: float

    @classmethod
    def load(cls, path: Path) -> Run:
        """Read ``ssbj_exec`` from a results.json."""
        doc = json.loads(path.read_text())
        r = doc["results"]["ssbj_exec"]
        ph = r["phase_seconds"]
        return cls(
            int(r["details"]["shards"]),
            int(r["tuples"]),
            float(r["wall_seconds"]),
            float(ph["driver_wall_per_batch"]),
            float(ph.get("stage1_read", 0.0)) + float(ph.get("stage1_decode", 0.0)),
            float(ph["shard_task"]),
            float(r["db"]["rows_read_per_tuple"]),
        )


@dataclass(frozen=True)
class Model:
    """The fitted terms (seconds over the whole run)."""

    other: float
    spark: float
    stage1: float
    a: float
    b: float
    cores: int
    sources: int
    rows_per_tuple: dict[int, float]

    @classmethod
    def fit(cls, p1: Run, p2: Run, cores: int, sources: int) -> Model:
        """Fit on a P = 1 and a P = 2 run made on ``cores`` cores from ``sources`` source partitions."""
        b = p2.shard_tasks - p1.shard_tasks
        a = p1.shard_tasks - b
        s1 = p1.stage1 / min(cores, sources)
        spark = p1.driver_wall - s1 - p1.shard_tasks
        return cls(
            p1.wall - p1.driver_wall,
            spark,
            p1.stage1,
            a,
            b,
            cores,
            sources,
            {1: p1.rows_per_tuple, 2: p2.rows_per_tuple},
        )

    def wall(self, p: int, cores: int | None = None, sources: int | None = None) -> float:
        """Predicted wall with ``p`` shards (default: the fitted machine's cores and sources)."""
        c = cores or self.cores
        s = sources or self.sources
        return self.other + self.spark + self.stage1 / min(c, s) + math.ceil(p / c) * (self.a + self.b * p) / p


def report(p1: Run, p2: Run, cores: int, sources: int) -> str:
    """Return the model as Markdown: terms, fit check, predicted curve."""
    m = Model.fit(p1, p2, cores, sources)
    n = p1.tuples
    lines = [
        f"Fitted on P = 1 and P = 2 ({cores} cores, {sources} source partitions, {n:,} tuples):",
        "",
        "| term | seconds |",
        "|---|---:|",
        f"| other (outside micro-batches) | {m.other:.2f} |",
        f"| spark (scheduling, shuffle, collect) | {m.spark:.2f} |",
        f"| stage 1 (source read, decode), summed | {m.stage1:.2f} |",
        f"| a (shard work that splits over shards) | {m.a:.2f} |",
        f"| b (per-shard fixed work) | {m.b:.2f} |",
        "",
        "| P | measured wall | predicted wall | measured tuples/s | predicted tuples/s | rows read per tuple |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for run in (p1, p2):
        w = m.wall(run.shards)
        lines.append(
            f"| {run.shards} | {run.wall:.1f} | {w:.1f} | {n / run.wall:,.0f} | {n / w:,.0f} "
            f"| {run.rows_per_tuple:.2f} |"
        )
    lines += [
        "",
        "Predicted with as many cores and source partitions as shards (the database not a limit):",
        "",
        "| P | predicted wall | predicted tuples/s | vs P = 1 |",
        "|---:|---:|---:|---:|",
    ]
    base = m.wall(1, 1, 1)
    for p in (1, 2, 4, 8, 16, 32):
        w = m.wall(p, p, p)
        lines.append(f"| {p} | {w:.1f} | {n / w:,.0f} | {base / w:.2f}x |")
    floor = m.other + m.spark + m.b
    lines += ["", f"Ceiling as P grows: wall -> other + spark + b = {floor:.1f} s ({n / floor:,.0f} tuples/s)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the model for a results directory."""
    ap = argparse.ArgumentParser(prog="python -m ssbj.bench.pipeline.scaling", description=__doc__.split("\n")[0])
    ap.add_argument("results", type=Path, help="a directory with *-p1/results.json and *-p2/results.json")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--sources", type=int, default=2, help="source (Kafka) partitions")
    args = ap.parse_args(argv)
    p1 = Run.load(next(args.results.glob("*-p1/results.json")))
    p2 = Run.load(next(args.results.glob("*-p2/results.json")))
    print(report(p1, p2, args.cores, args.sources))
    return 0


if __name__ == "__main__":
    sys.exit(main())
