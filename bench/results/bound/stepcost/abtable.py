"""Print stepcost.md's A/B table from ``ab.jsonl`` (median over repetitions, every repetition in brackets).

Usage: python bench/results/bound/stepcost/abtable.py bench/results/bound/stepcost/ab.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def row(frac: float, side: str, commit: str, rs: list[dict[str, Any]]) -> str:
    """Return one table row."""
    med = statistics.median

    def f(k: str) -> float:
        return med(r[k] for r in rs)

    def g(n: str, k: str) -> float:
        return med(r[n][k] for r in rs)

    def each(k: str) -> str:
        return ", ".join(f"{r[k]:.2f}" for r in rs)

    cells = [
        f"{frac:.0%}",
        f"{side} ({commit})",
        str(len(rs)),
        f"{f('tuples_ratio'):.2f}x",
        f"**{f('rate_ratio_cpu'):.2f}x** ({each('rate_ratio_cpu')})",
        f"{f('rate_ratio_cpu_median_step'):.2f}x",
        f"**{f('c_loop_same_w_cpu'):.2f}x** ({each('c_loop_same_w_cpu')})",
        f"{f('c_loop_same_w_cpu_median_step'):.2f}x",
        f"{f('rate_ratio_wall'):.2f}x / {f('c_loop_same_w_wall'):.2f}x",
        f"{g('ssbj', 'c_loop_cpu_ms'):.2f} / {g('meshjoin', 'c_loop_cpu_ms'):.2f} / "
        f"{g('meshjoin_same_w', 'c_loop_cpu_ms'):.2f}",
        f"{g('ssbj', 'rate_cpu') / 1e3:.0f}k / {g('meshjoin', 'rate_cpu') / 1e3:.0f}k",
        f"{max(r['ssbj']['peak_over_budget'] for r in rs):.3f} / "
        f"{max(r['meshjoin']['peak_over_budget'] for r in rs):.3f}",
        f"{min(r['load_start'][0] for r in rs):.0f}-{max(r['load_end'][0] for r in rs):.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


def main(path: str) -> None:
    """Print the rows of every budget and side found in ``path``."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    for frac in (0.01, 0.1):
        for side in ("base", "new"):
            got = [d for d in rows if d["side"] == side and abs(d["res"]["frac"] - frac) < 1e-9]
            if got:
                print(row(frac, side, got[0]["commit"], [d["res"] for d in got]))


if __name__ == "__main__":
    main(sys.argv[1])
