"""What the cached-row refresh costs in the paper's settings (Fig. 5a data, skew 1).

SSBJ with ``refresh_cache`` on and off, same budget and b, runs interleaved; the master
data does not change, so both produce the same output and the ratio of service rates is
the refresh's whole cost. Off, cached rows are exact only while R does not change.
"""

from __future__ import annotations

from ssbj.bench.harness import Bench, Json, RunConfig, _ratio
from ssbj.errors import ConfigError


def exp_refresh(bench: Bench) -> Json:
    """Service rate with the refresh over the rate without, at 1% and 10% of R."""
    p = bench.p
    ds = bench.synthetic(p.r_main, 1.0)
    points = []
    for frac in (0.01, 0.10):
        budget = int(frac * ds.r_bytes)
        try:
            b = bench.plan(ds, budget)
        except ConfigError as exc:
            points.append({"memory_fraction": frac, "error": str(exc)})
            continue
        cfgs = [
            RunConfig("ssbj", b, chunk_bytes=max(1, budget // 16), memory_budget=budget, refresh_cache=on)
            for on in (True, False)
        ]
        on, off = bench.runs(ds, cfgs)
        points.append(
            {
                "memory_fraction": frac,
                "budget": budget,
                "partition_rows": b,
                "refresh_on": on,
                "refresh_off": off,
                "ratio_on_over_off": _ratio(on["service_rate"], off["service_rate"]),
            }
        )
        bench.log(f"    refresh at {frac:.0%} of R: on/off = {points[-1]['ratio_on_over_off']:.3f}")
    return {"dataset": ds.info, "points": points}
