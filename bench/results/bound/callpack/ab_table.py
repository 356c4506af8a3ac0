"""Print the A/B rounds of ab_pack.jsonl (``stepcost_ab.py ab`` outputs) and their medians per side."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main(path: str) -> None:
    """One line per run, then the medians of base and new per budget."""
    by: dict[tuple[float, str], list[dict]] = {}
    for line in Path(path).read_text().splitlines():
        x = json.loads(line)
        r, s, m = x["r"], x["r"]["ssbj"], x["r"]["meshjoin"]
        by.setdefault((x["frac"], x["side"]), []).append(r)
        print(
            f"{x['round']} {x['frac']} {x['side']}: SSBJ c_loop {s['c_loop_cpu_ms']:.1f} ms,"
            f" {s['rate_cpu'] / 1e3:.0f}k/s, {s['tuples_per_r_cycle']:.0f} a R-cycle,"
            f" peak {s['peak_over_budget']:.4f}; MESHJOIN c_loop {m['c_loop_cpu_ms']:.1f} ms,"
            f" {m['rate_cpu'] / 1e3:.0f}k/s; ratio {r['rate_ratio_cpu']:.3f}"
        )
    for frac in sorted({f for f, _ in by}):
        med = {
            side: [statistics.median(r[a][b] for r in by[(frac, side)]) for a, b in _FIELDS] for side in ("base", "new")
        }
        print(
            frac, " ".join(f"{a}.{b}: {med['base'][i]:.3f} -> {med['new'][i]:.3f}" for i, (a, b) in enumerate(_FIELDS))
        )


_FIELDS = [("ssbj", "c_loop_cpu_ms"), ("meshjoin", "c_loop_cpu_ms"), ("ssbj", "tuples_per_r_cycle")]

if __name__ == "__main__":
    main(sys.argv[1])
