"""Print two ``stepcost_ab.py profile`` outputs side by side (CPU us per measured step).

Usage: python bench/results/bound/stepcost/cmp.py A.json B.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

NAMES = ("ssbj", "meshjoin", "meshjoin_same_w")


def main(pa: str, pb: str) -> None:
    """Print the phases of profile A and profile B, per configuration."""
    a = json.loads(Path(pa).read_text())
    b = json.loads(Path(pb).read_text())
    print(f"{'':30s}", *[f"{n[:9] + ' A':>9s} {'B':>9s}" for n in NAMES])
    print(
        f"{'cpu c_loop':30s}",
        *[f"{a[n]['unwrapped_cpu_c_loop_us']:9.0f} {b[n]['unwrapped_cpu_c_loop_us']:9.0f}" for n in NAMES],
    )
    for k in a["ssbj"]["per_step_us"]:
        cells = [f"{a[n]['per_step_us'].get(k, 0):9.1f} {b[n]['per_step_us'].get(k, 0):9.1f}" for n in NAMES]
        print(f"{k:30s}", *cells)
    print(a["load_start"], a["load_end"], b["load_start"], b["load_end"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
