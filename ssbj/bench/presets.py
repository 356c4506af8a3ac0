"""Benchmark scales (:class:`Preset`, :data:`PRESETS`) and the JSON type every experiment returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Preset:
    """Sizes of one benchmark scale; the paper's sizes are 20M-100M master tuples."""

    name: str
    r_main: int  # |R| of fig5a/5c/5f (paper: 100M)
    r_sizes: tuple[int, ...]  # fig5b (paper: 20M-100M)
    r_small: int  # fig4a, fig6a, fig6cd (paper: 20M)
    mem_fracs: tuple[float, ...]  # fig5a/5f (paper: 1%-10% of R)
    fixed_mem_frac: float  # fig5b: budget as a fraction of the largest R
    skews: tuple[float, ...]  # fig5c
    skew_mem_frac: float  # fig5c (paper: 10%)
    switch_factors: tuple[float, ...]  # fig6a
    sf_mem_frac: float  # fig6a (paper: 1%)
    fig4a_chunks: tuple[int, ...]  # bytes of stream tuples entering H_S per step
    fig4a_partitions: int
    tpch_scale: float
    tpch_mem_fracs: tuple[float, ...]
    hashjoin_r: int
    hashjoin_budget_factor: float  # budget = factor x projected R bytes ("memory for all of R")
    throughput_mem_frac: float
    cost_mem_frac: float
    calib_configs: tuple[tuple[int, int], ...]  # (k, chunk bytes), for both algorithms, skew 0 and 1
    calib_cycles: int
    warm_cycles_ssbj: int
    warm_cycles_mesh: int
    measure_cycles: int
    max_run_seconds: float  # a run's measurement stops after this, once one R-cycle is in
    min_partitions: int  # k >= this (the planner would pick k = 1 for budgets above |R|)
    segment_rows: int
    max_stream_rows: int
    max_step_tuples: int
    batch_rows: int
    master_payload: int  # bytes; 96 gives v_R = 112 B projected, as the paper's 11.18 GB/100M
    stream_payload: int
    pyarrow_reps: int
    reps: int  # repetitions of every operator run (median kept)
    bound_skews: tuple[float, ...] = (0.5, 1.0, 1.5)  # exp_bound
    bound_mem_fracs: tuple[float, ...] = (0.01, 0.10)


PRESETS: dict[str, Preset] = {
    "small": Preset(
        name="small",
        r_main=200_000,
        r_sizes=(100_000, 200_000),
        r_small=200_000,
        mem_fracs=(0.01, 0.05, 0.10),
        fixed_mem_frac=0.10,
        skews=(0.0, 0.5, 1.0),
        skew_mem_frac=0.10,
        switch_factors=(0.5, 1.0, 2.0),
        sf_mem_frac=0.01,
        fig4a_chunks=(8_192, 65_536),
        fig4a_partitions=4,
        tpch_scale=0.01,
        tpch_mem_fracs=(0.01, 0.10),
        hashjoin_r=50_000,
        hashjoin_budget_factor=2.0,
        throughput_mem_frac=0.10,
        cost_mem_frac=0.05,
        calib_configs=((4, 16_384), (16, 4_096), (64, 1_024), (16, 65_536)),
        calib_cycles=2,
        warm_cycles_ssbj=4,
        warm_cycles_mesh=2,
        measure_cycles=2,
        max_run_seconds=20.0,
        min_partitions=4,
        segment_rows=1 << 17,
        max_stream_rows=4_000_000,
        max_step_tuples=1 << 16,
        batch_rows=1 << 14,
        master_payload=96,
        stream_payload=16,
        pyarrow_reps=2,
        reps=1,
    ),
    "full": Preset(
        name="full",
        r_main=2_000_000,
        r_sizes=(250_000, 500_000, 1_000_000, 2_000_000),
        r_small=1_000_000,
        mem_fracs=(0.01, 0.02, 0.04, 0.06, 0.08, 0.10),
        fixed_mem_frac=0.10,
        skews=(0.0, 0.25, 0.5, 0.75, 1.0),
        skew_mem_frac=0.10,
        switch_factors=(0.25, 0.5, 1.0, 2.0, 4.0),
        sf_mem_frac=0.01,
        fig4a_chunks=(8_192, 32_768, 131_072, 524_288, 2_097_152),
        fig4a_partitions=16,
        tpch_scale=1.0,
        tpch_mem_fracs=(0.01, 0.02, 0.05, 0.10),
        hashjoin_r=1_000_000,
        hashjoin_budget_factor=2.0,
        throughput_mem_frac=0.10,
        cost_mem_frac=0.05,
        # H_S of 12k-66k tuples, and 524k for the probe's cost as H_S grows (CostConstants.c_hs)
        calib_configs=((8, 1 << 18), (16, 1 << 16), (64, 1 << 13), (192, 1 << 11), (16, 1 << 20)),
        calib_cycles=2,
        warm_cycles_ssbj=12,
        warm_cycles_mesh=3,
        measure_cycles=9,
        max_run_seconds=45.0,
        min_partitions=4,
        segment_rows=1 << 21,
        max_stream_rows=400_000_000,  # SSBJ with every value cached serves ~10M tuples an R-cycle
        max_step_tuples=1 << 20,
        batch_rows=1 << 16,
        master_payload=96,
        stream_payload=16,
        pyarrow_reps=3,
        reps=3,
    ),
}
