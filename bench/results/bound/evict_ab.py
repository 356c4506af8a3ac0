"""A/B of SSBJ's early eviction (``JoinSpec.early_eviction``) on and off, with MESHJOIN.

Usage (from the repository root; ``PYTHONPATH`` selects the operator code measured):

    PYTHONPATH=$PWD .venv/bin/python bench/results/bound/evict_ab.py 3 > evict_ab.json

The points and the harness of ``fsm_ab.py`` (the issue's data, skew 1, stationary and
drifting, 1% and 10% of R, the runs interleaved ``reps`` times in one process); prints one
JSON line per point: service rates, tuples per R-cycle, their ratios, cache shares, peaks.
"""

from __future__ import annotations

import sys

sys.path.insert(0, "bench/results/bound")
import fsm_ab


def main(reps: int) -> None:
    """Run every point and print it."""
    fsm_ab.run_points(
        reps,
        {
            "early": ("ssbj", {"early_eviction": True}),
            "interval": ("ssbj", {"early_eviction": False}),
            "meshjoin": ("meshjoin", {}),
        },
        [("early", "meshjoin"), ("interval", "meshjoin"), ("early", "interval")],
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
