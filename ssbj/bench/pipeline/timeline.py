"""A per-phase timeline of one run: when the master was read, and when the job decoded, joined, wrote.

Fed by :class:`ssbj.pipeline.observe.StepObserver` events (exact master-read intervals) and by
the job's progress records (decode, join, write and checkpoint seconds of each micro-batch,
placed back to back ending when the record arrived).  The report shows each phase as a row of
time bins and how many seconds pairs of phases overlapped: a job that reads the next master
partition while it joins, decodes or writes shows overlap; a sequential one shows none.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from ssbj.core.operator import StepResult

Interval = tuple[float, float]
BATCH_PHASES = ("decode", "join", "write", "checkpoint")  # the processor's order within a micro-batch
DRAIN_PHASES = ("join", "write", "checkpoint")


def merge(ivs: Iterable[Interval]) -> list[Interval]:
    """Return the union of intervals, as sorted disjoint intervals."""
    out: list[Interval] = []
    for s, e in sorted(iv for iv in ivs if iv[1] > iv[0]):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def total(ivs: Sequence[Interval]) -> float:
    """Seconds covered by disjoint intervals."""
    return sum(e - s for s, e in ivs)


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Intersection of two sorted disjoint interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Sequence[Interval], b: Sequence[Interval]) -> list[Interval]:
    """Return ``a`` minus ``b`` (both sorted and disjoint)."""
    out: list[Interval] = []
    j = 0
    for s, e in a:
        cur = s
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < e:
            out.append((cur, e))
    return out


class Timeline:
    """Intervals per phase (lane), in seconds since :meth:`start`; also a StepObserver."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.t_end: float | None = None
        self.lanes: dict[str, list[Interval]] = {}
        self._read_start: float | None = None

    # ------------------------------------------------------------------ recording
    def start(self) -> None:
        """Set time zero (the start of the measured run)."""
        self.t0 = time.perf_counter()

    def stop(self) -> None:
        """Set the end of the run."""
        self.t_end = time.perf_counter()

    def add(self, lane: str, start: float, end: float) -> None:
        """Record that ``lane`` was busy from ``start`` to ``end`` (perf_counter seconds)."""
        if self.t0 is None:
            return
        self.lanes.setdefault(lane, []).append((start - self.t0, end - self.t0))

    def add_phases(self, seconds: dict[str, float], order: Sequence[str], end: float | None = None) -> None:
        """Place a progress record's phase seconds back to back, the last ending at ``end`` (default: now)."""
        t = time.perf_counter() if end is None else end
        for phase in reversed(order):
            d = float(seconds.get(phase, 0.0))
            self.add(phase, t - d, t)
            t -= d

    def on_progress(self, p: dict[str, Any]) -> None:
        """Record one progress record of the ssbj job."""
        self.add_phases(p["seconds"], BATCH_PHASES if p["event"] == "batch" else DRAIN_PHASES)

    def on_step(self, result: StepResult) -> None:
        """Ignore steps: they are inside the join phase, and their reads are recorded separately."""

    def before_partition_read(self, partition: int) -> None:
        """Note when the read started."""
        self._read_start = time.perf_counter()

    def after_partition_read(self, partition: int, rows: int, seconds: float) -> None:
        """Record the read (``seconds`` is the scan's own timing; it ends now)."""
        now = time.perf_counter()
        self.add("master_read", now - seconds, now)

    # ------------------------------------------------------------------ analysis
    def result(self, bins: int = 60) -> dict[str, Any]:
        """Busy seconds per lane, pairwise overlaps, concurrency, and a binned picture."""
        if self.t0 is None:
            return {}
        wall = (
            (self.t_end - self.t0)
            if self.t_end is not None
            else max((e for v in self.lanes.values() for _, e in v), default=0.0)
        )
        lanes = {k: merge(v) for k, v in self.lanes.items()}
        if "join" in lanes and "master_read" in lanes:  # the join phase contains the reads it waits for
            lanes["join_compute"] = subtract(lanes.pop("join"), lanes["master_read"])
        elif "join" in lanes:
            lanes["join_compute"] = lanes.pop("join")
        known = ("collect", "decode", "master_read", "join_compute", "lookup", "write", "checkpoint", "batch")
        order = [k for k in known if k in lanes]
        order += [k for k in lanes if k not in order]
        busy = {k: total(lanes[k]) for k in order}
        overlap = {}
        for i, a in enumerate(order):
            for b in order[i + 1 :]:
                s = total(intersect(lanes[a], lanes[b]))
                if s > 0:
                    overlap[f"{a}&{b}"] = s
        union = total(merge(iv for k in order for iv in lanes[k]))
        width = wall / bins if wall > 0 else 0.0
        binned: dict[str, list[float]] = {}
        for k in order:
            row = [0.0] * bins
            if width > 0:
                for s, e in lanes[k]:
                    b0, b1 = int(s // width), min(bins - 1, int(e // width))
                    for i in range(max(0, b0), b1 + 1):
                        lo, hi = max(s, i * width), min(e, (i + 1) * width)
                        if hi > lo:
                            row[i] += (hi - lo) / width
            binned[k] = [round(min(1.0, x), 2) for x in row]
        master_overlap = sum(v for k, v in overlap.items() if "master_read" in k.split("&"))
        return {
            "wall_seconds": wall,
            "bin_seconds": width,
            "busy_seconds": busy,
            "overlap_seconds": overlap,
            "union_seconds": union,
            "concurrency": sum(busy.values()) / union if union else None,
            "master_read_overlap_seconds": master_overlap,
            "idle_seconds": max(0.0, wall - union),
            "bins": binned,
        }


def render(tl: dict[str, Any]) -> list[str]:
    """ASCII rows of a timeline result: one row per phase, one character per bin (' .+#' = busy share)."""
    if not tl or not tl.get("bins"):
        return []
    width = max(len(k) for k in tl["bins"])
    rows = []
    for k, row in tl["bins"].items():
        chars = "".join(" " if x == 0 else "." if x < 1 / 3 else "+" if x < 2 / 3 else "#" for x in row)
        rows.append(f"{k:>{width}} |{chars}| {tl['busy_seconds'][k]:.1f} s")
    bins = len(next(iter(tl["bins"].values())))
    right = f"{tl['wall_seconds']:.0f} s"
    rows.append(" " * (width + 2) + "0 s" + " " * max(1, bins - 3 - len(right)) + right)
    return rows
