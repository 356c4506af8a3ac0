"""The SSBJ cost model (Eq. 1-6), its per-machine calibration, and the memory planner."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from ssbj.core.hsindex import INDEX_LOAD, INDEX_SLOT
from ssbj.errors import ConfigError, InputError


@dataclass(frozen=True)
class StepCost:
    """Sizes of one loop iteration: b master tuples, w_N cache-phase and w_S disk-phase tuples.

    ``hs``: tuples in H_S while the partition probes it (0: not known, priced as a small H_S).
    """

    b: int
    w_n: int
    w_s: int
    n_out: int
    hs: int = 0


def probed_hs(hs_after: int, w_s: int, b: int) -> int:
    """Tuples in H_S while a step's partition of ``b`` rows probed it (:attr:`StepCost.hs`).

    Those it holds after the step and, about as many as entered, the chunk it expired; 0
    when the step read no partition.
    """
    return hs_after + w_s if b else 0


@dataclass(frozen=True)
class CostConstants:
    """Nanoseconds per unit (Table 1); grouped as they appear in Eq. 2.

    ``c_fixed`` is the per-iteration cost of a vectorised implementation (kernel calls,
    Arrow slicing); the paper's per-tuple Java loop has none. ``c_o`` is charged per
    output row, which equals the paper's per-tuple c_O for one-to-many joins.
    """

    c_fixed: float = 200_000.0
    c_io_row: float = 30.0  # c_I/O(b) / b
    c_h: float = 40.0
    c_b: float = 5.0
    c_s: float = 20.0
    c_a: float = 60.0
    c_e: float = 30.0
    c_o: float = 150.0
    # the hybrid step's lookup path (docs/hybrid.md): per round trip to the master (also
    # paid by each partition read), per key looked up, per master row returned
    c_rt: float = 100_000.0
    c_key: float = 5_000.0
    c_row: float = 2_000.0
    # one more piece of a partition read in pieces (JoinSpec.disk_chunk_rows): encoding its
    # keys, one kernel call, its takes (measured: ssbj.bench / docs/bound.md)
    c_piece: float = 120_000.0
    # a master row's probe costs more as H_S grows: its reads into H_S's value index and
    # links leave the caches (32-41 ns a row at <= 18k tuples, 58-63 ns at ~100k, 98 ns at
    # 320k; bench/results/costmodel): ns more per master row per million tuples in H_S
    c_hs: float = 0.0

    def save(self, path: str | Path) -> None:
        """Write as JSON."""
        Path(path).write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> CostConstants:
        """Read a calibration written by :meth:`save`."""
        try:
            data = json.loads(Path(path).read_text())
            return cls(**{k: float(v) for k, v in data.items() if k in cls.__dataclass_fields__})
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"cannot read cost calibration {path}: {exc}") from exc


class CostModel:
    """Eq. 1 (memory), Eq. 2 (c_loop) and Eq. 3 (service rate)."""

    def __init__(self, constants: CostConstants | None = None) -> None:
        self.k = constants or CostConstants()

    def c_loop(self, s: StepCost) -> float:
        """Eq. 2: seconds for one iteration."""
        k = self.k
        ns = (
            k.c_fixed
            + s.b * (k.c_io_row + k.c_h + k.c_b + 1e-6 * s.hs * k.c_hs)
            + s.w_n * (k.c_s + k.c_h)
            + s.w_s * (k.c_e + k.c_s + k.c_a)
            + s.n_out * k.c_o
        )
        return 1e-9 * ns

    def scan_cost(self, b: float) -> float:
        """Seconds to read one partition of ``b`` rows and probe H_S with it."""
        k = self.k
        return 1e-9 * (k.c_rt + b * (k.c_io_row + k.c_h + k.c_b))

    def lookup_cost(self, keys: int, rows: float, batch: int) -> float:
        """Seconds to fetch the rows of ``keys`` distinct keys, ``batch`` keys per round trip."""
        k = self.k
        trips = -(-keys // max(1, batch))
        return 1e-9 * (trips * k.c_rt + keys * k.c_key + rows * k.c_row)

    def service_rate(self, s: StepCost) -> float:
        """Eq. 3: mu = (w_N + w_S) / c_loop."""
        return (s.w_n + s.w_s) / self.c_loop(s)

    @staticmethod
    def memory(b: int, h_r: int, w_s: int, r_t: int, v_s: float, v_r: float, v_p: float, f: float) -> float:
        """Eq. 1: M = (b + h_R f) v_R + w_S (R_t / b) (v_P + f v_S)."""
        return (b + h_r * f) * v_r + w_s * (r_t / b) * (v_p + f * v_s)


def calibrate(samples: list[tuple[StepCost, float]]) -> CostConstants:
    """Fit the constants to measured (step, c_loop seconds) samples by relative least squares.

    Eq. 2 is linear in the constants; only the sums that multiply one feature (b, w_N,
    w_S, outputs, b x tuples in H_S) are identifiable from whole-step timings, so the fit
    keeps those sums exactly and splits each among its constants in the default ratios.
    Samples without H_S's size (``hs`` = 0) leave ``c_hs`` at 0.
    """
    if len(samples) < 5:
        raise InputError(f"calibration needs at least 5 measured steps, got {len(samples)}")
    x = np.array([[1.0, s.b, s.w_n, s.w_s, s.n_out, 1e-6 * s.b * s.hs] for s, _ in samples])
    y = np.array([t * 1e9 for _, t in samples])
    # relative least squares (each row divided by its measurement): steps of every size
    # count alike, so the fit holds from tiny to large iterations instead of only the large
    wgt = 1.0 / np.maximum(y, 1.0)
    coef, *_ = np.linalg.lstsq(x * wgt[:, None], y * wgt, rcond=None)
    coef = np.maximum(coef, 0.0)
    c_fixed, g_b, g_n, g_s, c_o, c_hs = (float(v) for v in coef)
    # Eq. 2 groups: g_b = c_io + c_h + c_b, g_n = c_s + c_h, g_s = c_e + c_s + c_a.
    # c_h must lie in [max(0, g_n - g_s), min(g_b, g_n)] for every constant to be >= 0 with
    # every group sum kept; within that, the default split (c_h = 0.7 g_n) where possible.
    lo, hi = max(0.0, g_n - g_s), min(g_b, g_n)
    c_h = min(max(0.7 * g_n, lo), hi) if lo <= hi else hi
    c_s = min(max(g_n - c_h, 0.0), g_s)
    d = CostConstants()
    rest_b = g_b - c_h
    rest_s = g_s - c_s
    return CostConstants(
        c_fixed=c_fixed,
        c_io_row=rest_b * d.c_io_row / (d.c_io_row + d.c_b),
        c_h=c_h,
        c_b=rest_b * d.c_b / (d.c_io_row + d.c_b),
        c_s=c_s,
        c_a=rest_s * d.c_a / (d.c_a + d.c_e),
        c_e=rest_s * d.c_e / (d.c_a + d.c_e),
        c_o=c_o,
        c_hs=c_hs,
    )


def calibrate_lookup(
    lookups: list[tuple[int, int, int, float]],
    scans: list[tuple[int, float]],
    base: CostConstants | None = None,
) -> CostConstants:
    """Fit c_rt, c_key, c_row and c_io_row to measured lookups and partition reads.

    ``lookups``: (round trips, keys, rows returned, seconds); ``scans``: (rows read,
    seconds) of whole partition reads. One least-squares fit over both, since a round
    trip costs the same on either path; the other constants are kept from ``base``
    (a partition read's per-row time is c_io_row; the probe's c_h + c_b come on top).
    """
    if len(lookups) + len(scans) < 4 or not lookups or not scans:
        raise ConfigError("lookup calibration needs lookups and partition reads, at least 4 in all")
    d = base or CostConstants()
    rows = [[t, k, r, 0.0] for t, k, r, _ in lookups] + [[1.0, 0.0, 0.0, b] for b, _ in scans]
    y = np.array([s * 1e9 for *_, s in lookups] + [s * 1e9 for _, s in scans])
    x = np.array(rows, dtype=float)
    wgt = 1.0 / np.maximum(y, 1.0)  # relative: small and large calls count alike
    coef, *_ = np.linalg.lstsq(x * wgt[:, None], y * wgt, rcond=None)
    c_rt, c_key, c_row, per_row = (max(float(v), 0.0) for v in coef)
    return replace(d, c_rt=c_rt, c_key=c_key, c_row=c_row, c_io_row=per_row)


# Bytes the operator's structures add to the raw rows (see ssbj.core.hs and ssbj.core.budget):
HS_TUPLE_OVERHEAD = 8 + 3 + 4 / 0.75  # per waiting tuple: encoded key, link, worst-case index share
DISK_ROW_OVERHEAD = 9  # per row of the disk buffer: encoded key and validity
QUEUE_RECORD = 32  # per chunk record of Q
PIECE_SHARE = 0.04  # of the budget: one piece of a partition read in pieces (piece_rows)
MIN_PIECE_ROWS = 1024
# Bytes that grow with a step's size, not with the tuples held: what makes few, large steps
# (small k) cost memory. A chunk enters H_S before the oldest leaves and may be all new
# values, so H_S's value index keeps room for one chunk of them (per w_S tuple: one index
# word at the index's load, ssbj.core.budget.values_per_tuple); and the step's temporaries
# per tuple read. Both phases' kernel calls are bounded (ssbj.core.budget.cache_call_tuples,
# probe_call_pairs), so these no longer grow with the step but for a few calls' worth:
# measured 1.4-4.2 B per tuple read at k = 5 (issue data, 1% and 10% of R; 9 B for MESHJOIN
# before the disk phase's calls were bounded; docs/bound.md, "2026-11-29, later")
NEW_CHUNK_INDEX_BYTES = INDEX_SLOT / INDEX_LOAD
STEP_TUPLE_BYTES = 4.0
RESERVE_SHARE = 0.06  # of the budget: value statistics, the disk phase's filter, per-step temporaries


@dataclass(frozen=True)
class MemoryPlan:
    """W and b chosen for a memory budget, with the model's prediction."""

    partition_rows: int  # b
    partitions: int  # k = R_t / b
    chunk_bytes: int  # bytes of stream tuples entering H_S per step (w_S * v_S)
    w_s: int
    predicted_c_loop: float
    predicted_service_rate: float
    disk_chunk_rows: int | None = None  # rows per piece of a partition (None: read whole)


def plan_memory(
    budget: int,
    r_t: int,
    v_s: float,
    v_r: float,
    model: CostModel,
    v_p: float = HS_TUPLE_OVERHEAD,
    f: float = 1.0,
    cache_share: float = 0.0,
    prefetch: int = 0,
    chunked: bool = False,
    resident: bool = False,
) -> MemoryPlan:
    """Pick b (and so w_S) that maximise the predicted service rate within ``budget`` bytes.

    For each candidate b, Eq. 1 with the structures' real sizes gives the largest w_S
    that fits: the disk buffer holds b rows of ``v_R`` plus their encoded keys, H_S's
    ring holds k chunks of w_S tuples (a chunk enters in the cache phase, the oldest
    leaves after the disk phase: at most k are live, :mod:`ssbj.core.budget`) of
    ``v_S + v_P`` bytes, Q one record per chunk, and a reserve is kept for the value
    statistics and per-step temporaries. Eq. 2 gives the cost of the iteration, Eq. 3
    the service rate; ``cache_share`` is the expected share of tuples the cache phase
    serves (0 for MESHJOIN), so w = w_S / (1 - share). ``prefetch`` partitions read ahead
    (:mod:`ssbj.core.prefetch`) each take one more disk buffer.

    ``chunked``: the master hands partitions out in pieces (:class:`ssbj.contracts.MasterChunks`,
    no read ahead), so the disk buffer holds one piece of :func:`piece_rows` rows, not b:
    b then costs no memory, only time (fewer, larger steps per R-cycle against the ring's
    extra chunk), and each piece beyond the first costs ``c_piece``. ``resident``: the
    partitions are already in memory (:class:`ssbj.contracts.MasterResident`) and probed
    in one pass, so the pieces bound only the disk buffer's charge and cost no time.
    """
    if prefetch < 0:
        raise ConfigError(f"prefetch depth must be >= 0, got {prefetch}")
    if budget <= 0:
        raise ConfigError(f"memory budget must be > 0, got {budget}")
    r_t = max(r_t, 1)
    best: MemoryPlan | None = None
    candidates = sorted({max(1, int(r_t / k)) for k in _k_candidates(r_t)})
    pieces = chunked and prefetch == 0
    piece = piece_rows(budget, v_r)
    # a partition smaller than a piece is read whole: it may take no more of the budget than a
    # piece's share, which leaves the cache its room at small budgets (the plan does not model H_R)
    whole_most = max(1, int(PIECE_SHARE * budget / (v_r + DISK_ROW_OVERHEAD)))
    for b in candidates:
        k = math.ceil(r_t / b)
        if pieces and whole_most < b < piece:
            continue
        sizes = [min(b, piece)] if pieces else [b]
        for rows in sizes:
            buffers = (1 + prefetch) * rows * (v_r + DISK_ROW_OVERHEAD)
            left = budget * (1.0 - RESERVE_SHARE) - buffers - (k + 2) * QUEUE_RECORD
            if left <= 0:
                continue
            served = 1.0 / max(1e-6, 1.0 - cache_share)  # tuples a step reads per tuple entering H_S
            w_s = int(left / (k * (v_p + f * v_s) + NEW_CHUNK_INDEX_BYTES + served * STEP_TUPLE_BYTES))
            if w_s < 1:
                continue
            w = w_s * served
            w_n = int(w - w_s)
            step = StepCost(b=b, w_n=w_n, w_s=w_s, n_out=w_s + w_n, hs=k * w_s)
            extra_pieces = 0 if resident else math.ceil(b / rows) - 1
            c = model.c_loop(step) + 1e-9 * model.k.c_piece * extra_pieces
            mu = (w_s + w_n) / c
            if best is None or mu > best.predicted_service_rate:
                best = MemoryPlan(b, k, int(w_s * v_s), w_s, c, mu, rows if rows < b else None)
    if best is None:
        raise ConfigError(
            f"memory budget of {budget} bytes cannot hold one master tuple ({v_r:.0f} B) and one "
            f"stream tuple per partition; raise --memory"
        )
    return best


def _k_candidates(r_t: int) -> list[int]:
    """Partition counts to try: a geometric grid from 1 to R_t (one tuple per partition)."""
    ks = []
    k = 1.0
    while k <= r_t:
        ks.append(int(k))
        k *= 1.25
    return sorted(set(ks))


def piece_rows(budget: int, v_r: float) -> int:
    """Rows of one piece of a partition read in pieces: ``PIECE_SHARE`` of the budget, at least ``MIN_PIECE_ROWS``.

    A rule, not the cost model's choice: the time a piece costs (``c_piece``, 50-150 us
    measured, mostly fixed Arrow and kernel-call overhead) is not calibrated, and with
    noisy calibrations the model traded half the budget for fewer pieces. The floor keeps
    that overhead below ~2x the probe's own cost per row (43 ns).
    """
    return max(MIN_PIECE_ROWS, int(PIECE_SHARE * budget / (v_r + DISK_ROW_OVERHEAD)))
