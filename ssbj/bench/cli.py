"""``ssbj bench``: run the paper's experiments, write ``results.json`` and PNGs, print a summary.

The command line (``ssbj/cli.py``) calls :func:`add_arguments` and :func:`run`.  The
summary prints SSBJ/MESHJOIN ratios per experiment and the issue's targets (met, or missed
by how much); targets are read from the benchmark, never asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as md
import json
import math
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ssbj.bench.exp_bound import FACTORS_NOTE, breakdown_markdown, factors_markdown
from ssbj.bench.experiments import EXPERIMENTS, PRESETS, run_experiments
from ssbj.bench.pipeline import cli as pipeline_cli
from ssbj.core import CostConstants
from ssbj.errors import SSBJError

__all__ = ["add_arguments", "machine_info", "run", "summarize"]

Json = dict[str, Any]
TARGETS = {
    "ssbj_vs_meshjoin_skew1_mem1pct": (7.0, "SSBJ/MESHJOIN service rate at skew 1, memory 1% of R"),
    "efficiency_skew1_mem1pct": (0.8, "achieved SSBJ/MESHJOIN over Theorem 1's bound, stationary skew 1, 1% of R"),
    "efficiency_skew1_mem10pct": (0.8, "achieved SSBJ/MESHJOIN over Theorem 1's bound, stationary skew 1, 10% of R"),
    "meshjoin_vs_own_bound_mem10pct": (0.8, "MESHJOIN's tuples per R-cycle over M / v_S, skew 1, 10% of R"),
    "ssbj_vs_pyarrow_all_of_R": (0.5, "SSBJ / one-shot pyarrow hash join throughput, memory for all of R"),
    "data_plane_tuples_per_cpu_second": (1e6, "data plane stream tuples per CPU second (per core), skew 1"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ssbj bench``."""
    parser.add_argument(
        "--scale",
        choices=sorted(PRESETS),
        default="small",
        help="size preset: small (seconds, CI smoke) or full (|R| up to 2M, ~10 min on 2 cores)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        choices=list(EXPERIMENTS),
        help=f"run only these experiments ({', '.join(EXPERIMENTS)})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("bench/results"),
        help="output directory for results.json and the PNGs (default: bench/results)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where generated TPC-H files are kept (default: a directory under the temp dir)",
    )
    parser.add_argument("--seed", type=int, default=0, help="data generator seed")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNGs")
    parser.add_argument(
        "--save-calibration",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the cost-model constants fitted on this machine to FILE (for 'ssbj join --calibration')",
    )
    suites = parser.add_subparsers(dest="suite", metavar="pipeline", title="other benchmarks")
    pipeline = suites.add_parser(
        "pipeline",
        help="the end-to-end benchmark (Kafka -> Spark -> every join method -> MariaDB); 'ssbj bench pipeline --help'",
        description="End-to-end benchmark: Kafka (Tansu) -> Spark -> SSBJ/MESHJOIN/alternatives -> MariaDB.",
    )
    pipeline_cli.add_arguments(pipeline)


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def machine_info() -> Json:
    """Where the numbers were measured."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = None
    return {
        "nproc": os.cpu_count(),
        "cpu_affinity": affinity,
        "memory_bytes": mem,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "versions": {p: _version(p) for p in ("ssbj", "numpy", "pyarrow", "numba", "matplotlib", "tpchgen-cli")},
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }


def _fmt_rate(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k"


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _target(value: float | None, threshold: float, what: str, source: str) -> Json:
    if value is None:
        return {"what": what, "threshold": threshold, "value": None, "met": None, "status": "not measured"}
    met = value >= threshold
    status = "met" if met else f"missed by {100 * (1 - value / threshold):.0f}% (reached {value / threshold:.0%})"
    return {"what": what, "threshold": threshold, "value": value, "met": met, "status": status, "source": source}


def _over_budget(pt: Json) -> str:
    """Peak reported memory over the budget, per algorithm, when either exceeds it."""
    over = [pt[a].get("memory_max_over_budget") for a in ("ssbj", "meshjoin")]
    if any(o is not None and o > 1.0 for o in over):
        return f", peak mem/budget {over[0]:.2f}/{over[1]:.2f}"
    return ""


def summarize(exps: dict[str, Json]) -> Json:
    """Rows of the summary table and the target checks, from the experiment results."""
    rows: list[list[str]] = []
    targets: Json = {}

    def pair_rows(name: str, label: str, points: list[Json], xkey: str, fmt: str) -> None:
        for pt in points:
            x = pt[xkey]
            if "error" in pt:
                rows.append([name, label.format(x=fmt.format(x)), "-", "-", "-", "error: " + pt["error"][:160]])
                continue
            rows.append(
                [
                    name,
                    label.format(x=fmt.format(x)),
                    _fmt_rate(pt["ssbj"]["service_rate"]),
                    _fmt_rate(pt["meshjoin"]["service_rate"]),
                    _fmt_ratio(pt.get("ratio_service_rate")),
                    f"cache {pt['ssbj']['cache_share']:.0%}{_over_budget(pt)}",
                ]
            )

    if "fig5a" in exps:
        pts = exps["fig5a"]["points"]
        pair_rows("fig5a", "mem {x} of R", pts, "memory_fraction", "{:.0%}")
        one = min(pts, key=lambda p: abs(p["memory_fraction"] - 0.01))
        t = TARGETS["ssbj_vs_meshjoin_skew1_mem1pct"]
        targets["ssbj_vs_meshjoin_skew1_mem1pct"] = _target(
            one.get("ratio_service_rate"), t[0], t[1], f"fig5a at memory {one['memory_fraction']:.0%}"
        )
    if "fig5b" in exps:
        pair_rows("fig5b", "|R|={x}", exps["fig5b"]["points"], "r_rows", "{:,}")
    if "fig5c" in exps:
        pair_rows("fig5c", "skew {x}", exps["fig5c"]["points"], "skew", "{:g}")
    if "fig5d" in exps:
        pair_rows("fig5d", "TPC-H mem {x}", exps["fig5d"]["points"], "memory_fraction", "{:.0%}")
    if "fig5f" in exps:
        for pt in exps["fig5f"]["points"]:
            rows.append(
                ["fig5f", f"mem {pt['memory_fraction']:.0%} of R", "-", "-", "-", f"cache {pt['cache_share']:.0%}"]
            )
    if "fig6a" in exps:
        r = exps["fig6a"]
        for pt in r["points"]:
            rows.append(
                [
                    "fig6a",
                    f"s_f={pt['switch_factor']:g}",
                    _fmt_rate(pt["service_rate"]),
                    _fmt_rate(r["meshjoin_service_rate"]),
                    _fmt_ratio(pt["ratio_to_meshjoin"]),
                    f"cache {pt['cache_share']:.0%}",
                ]
            )
    if "fig4a" in exps:
        for e in exps["fig4a"]["memory_ratio_at_equal_rate"]:
            if "ratio_memory_mean" in e:
                rows.append(
                    [
                        "fig4a",
                        f"rate {_fmt_rate(e['service_rate'])}",
                        "-",
                        "-",
                        f"mem {e['ratio_memory_mean']:.2f}x",
                        f"tuples-only {e['ratio_tuple_memory_mean']:.2f}x",
                    ]
                )
    if "fig6cd" in exps:
        for skew, per in exps["fig6cd"]["skews"].items():
            if "error" in per:
                continue
            for algo in ("ssbj", "meshjoin"):
                err = per[algo]["median_abs_rel_error"]
                rows.append(
                    [
                        "fig6cd",
                        f"skew {skew} {algo}",
                        "-",
                        "-",
                        "-",
                        f"median |pred-meas|/meas {100 * err:.0f}%" if err is not None else "-",
                    ]
                )
    if "hashjoin" in exps:
        h = exps["hashjoin"]
        rows.append(
            [
                "hashjoin",
                "all of R",
                _fmt_rate(h["ssbj"]["service_rate"]),
                _fmt_rate(h["meshjoin"]["service_rate"]),
                _fmt_ratio(h["ratio_ssbj_to_meshjoin"]),
                f"pyarrow {_fmt_rate(h['pyarrow']['threads']['rate_wall'])} "
                f"(1 thread {_fmt_rate(h['pyarrow']['single_thread']['rate_wall'])}), "
                f"SSBJ e2e/pyarrow {_fmt_ratio(h['ratio_e2e_wall_to_pyarrow'])} on {h.get('threads', 1)} threads "
                f"(1 thread each {_fmt_ratio(h.get('ratio_e2e_wall_to_pyarrow_single_thread'))})",
            ]
        )
        t = TARGETS["ssbj_vs_pyarrow_all_of_R"]
        targets["ssbj_vs_pyarrow_all_of_R"] = _target(
            h["ratio_e2e_wall_to_pyarrow"],
            t[0],
            t[1],
            "hashjoin: SSBJ end-to-end (push + steps, wall) / pyarrow Table.join (default threads, wall)",
        )
    for name in ("bound", "bound_sql"):
        if name not in exps:
            continue
        for pt in exps[name]["points"]:
            setting = f"skew {pt['skew']:g} {'drift' if pt['drifting'] else 'stat.'} {pt['memory_fraction']:.0%}"
            if name == "bound_sql":
                setting += ", R in SQLite"
            if "error" in pt:
                rows.append([name, setting, "-", "-", "-", "error: " + pt["error"][:160]])
                continue
            eff = pt.get("efficiency")
            rows.append(
                [
                    name,
                    setting,
                    _fmt_rate(pt["ssbj"]["service_rate"]),
                    _fmt_rate(pt["meshjoin"]["service_rate"]),
                    _fmt_ratio(pt.get("ratio_service_rate")),
                    f"bound {_fmt_ratio(pt['bound']['ratio'])}, efficiency "
                    f"{'-' if eff is None else f'{eff:.2f}'}, MESHJOIN {pt['meshjoin_vs_own_bound']:.2f} of M/v_S, "
                    f"c_loop at equal w {_fmt_ratio(pt.get('c_loop_ratio_same_w'))}" + _budgeted(pt) + ", "
                    f"budget/waiting tuple {pt['budget_bytes_per_waiting_tuple_over_v_s']:.2f} v_S" + _at_peak(pt),
                ]
            )
            if name == "bound" and pt["skew"] == 1.0 and not pt["drifting"]:
                pct = round(100 * pt["memory_fraction"])
                for key, value in (
                    (f"efficiency_skew1_mem{pct}pct", eff),
                    (f"meshjoin_vs_own_bound_mem{pct}pct", pt["meshjoin_vs_own_bound"]),
                ):
                    if key in TARGETS:
                        t = TARGETS[key]
                        targets[key] = _target(value, t[0], t[1], f"bound: skew 1, stationary, {pct}% of R")
    if "refresh" in exps:
        for pt in exps["refresh"]["points"]:
            if "error" in pt:
                continue
            rows.append(
                [
                    "refresh",
                    f"mem {pt['memory_fraction']:.0%} of R",
                    _fmt_rate(pt["refresh_on"]["service_rate"]),
                    "-",
                    _fmt_ratio(pt["ratio_on_over_off"]),
                    f"SSBJ with / without the cached-row refresh ({_fmt_rate(pt['refresh_off']['service_rate'])})",
                ]
            )
    if "throughput" in exps:
        cfgs = exps["throughput"]["configs"]
        for label, per in cfgs.items():
            rows.append(
                [
                    "throughput",
                    label,
                    _fmt_rate(per["ssbj"]["tuples_per_cpu_second"]),
                    _fmt_rate(per["meshjoin"]["tuples_per_cpu_second"]),
                    "-",
                    "tuples per CPU second",
                ]
            )
        first = next(iter(cfgs))
        t = TARGETS["data_plane_tuples_per_cpu_second"]
        targets["data_plane_tuples_per_cpu_second"] = _target(
            cfgs[first]["ssbj"]["tuples_per_cpu_second"], t[0], t[1], f"throughput: SSBJ, {first}"
        )
    return {"header": ["experiment", "setting", "SSBJ", "MESHJOIN", "ratio", "notes"], "rows": rows, "targets": targets}


def _print_summary(summary: Json, out: Any) -> None:
    rows = [summary["header"], *summary["rows"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip(), file=out)
        if i == 0:
            print("  ".join("-" * w for w in widths), file=out)
    if summary["targets"]:
        print("\ntargets (read from the benchmark, not asserted):", file=out)
        for t in summary["targets"].values():
            v = t["value"]
            val = "-" if v is None else (f"{v:,.0f}" if t["threshold"] >= 100 else f"{v:.2f}")
            print(f"  {t['what']}: {val} (target >= {t['threshold']:g}): {t['status']}", file=out)


def write_report(doc: Json, path: Path) -> None:
    """Write the run as Markdown: command, machine, summary table, target checks."""
    m = doc["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items() if v)
    lines = [
        "# Benchmark results",
        "",
        "Produced by this command, from the repository root, after `./scripts/demo.sh` or",
        "`scripts/setup.sh dev` has created `.venv`:",
        "",
        "```bash",
        f".venv/bin/{doc['command']}",
        "```",
        "",
        f"Run {doc.get('started', '?')} to {doc.get('finished', '?')} ({doc.get('seconds', 0):.0f} s) on "
        f"{m.get('nproc')} cores, {m.get('memory_bytes', 0) / 2**30:.0f} GiB, {m.get('platform')}, "
        f"Python {m.get('python')}; {versions}. Load average at start {m.get('loadavg')}, "
        f"at end {m.get('loadavg_end')}.",
        "",
        "All rates are SSBJ and MESHJOIN measured side by side in one process on the same data "
        "(median of interleaved repetitions); read the ratios, not the absolute numbers. "
        "`results.json` holds every measurement, `*.png` the plots.",
        "",
    ]
    rows = [doc["summary"]["header"], *doc["summary"]["rows"]]
    lines.append("| " + " | ".join(rows[0]) + " |")
    lines.append("|" + "---|" * len(rows[0]))
    lines.extend("| " + " | ".join(r) + " |" for r in rows[1:])
    lines += ["", "## Targets (read from the benchmark, not asserted in tests)", ""]
    for t in doc["summary"]["targets"].values():
        v = t["value"]
        val = "-" if v is None else (f"{v:,.0f}" if t["threshold"] >= 100 else f"{v:.2f}")
        lines.append(f"* {t['what']}: **{val}** (target >= {t['threshold']:g}): {t['status']}")
    if "bound" in doc["experiments"]:
        table = breakdown_markdown(doc["experiments"]["bound"])
        if table:
            lines += ["", "## Where the budget goes (bound experiment, skew 1, stationary)", "", *table]
        table = factors_markdown(doc["experiments"]["bound"])
        if table:
            lines += ["", "## Where the efficiency goes (bound experiment)", "", *FACTORS_NOTE, "", *table]
    if "bound_sql" in doc["experiments"]:
        table = factors_markdown(doc["experiments"]["bound_sql"])
        if table:
            lines += ["", "## Where the efficiency goes with R in SQLite (experiment bound_sql)", "", *table]
    path.write_text("\n".join(lines) + "\n")


def _budgeted(pt: Json) -> str:
    """C_loop at equal w against a budgeted MESHJOIN (its H_S index planned like SSBJ's), when measured."""
    r = pt.get("c_loop_ratio_same_w_budgeted")
    if r is None:
        return ""
    w = pt["meshjoin_same_w_budgeted"]["w_per_step"] / max(pt["ssbj"]["w_per_step"], 1e-9)
    return f" ({_fmt_ratio(r)} against MESHJOIN under a budget at {w:.2f} of SSBJ's w)"


def _at_peak(pt: Json) -> str:
    """Format the budget per tuple H_S holds at the step's peak (absent from older runs)."""
    v = pt.get("budget_bytes_per_waiting_tuple_at_peak_over_v_s")
    return "" if v is None else f" at the step's end, {v:.2f} at its peak"


def run(args: argparse.Namespace) -> int:
    """Run ``ssbj bench``; returns the exit code."""
    if getattr(args, "suite", None) == "pipeline":
        return pipeline_cli.execute(args)
    preset = PRESETS[args.scale]
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    data_dir: Path = args.data_dir or Path(tempfile.gettempdir()) / "ssbj-bench-data"
    path = out / "results.json"
    command = _command(args)
    started = dt.datetime.now(dt.UTC)
    doc: Json = {}
    if args.only and path.exists():  # update a previous run of the same scale in place
        try:
            prev = json.loads(path.read_text())
            if prev.get("scale") == args.scale:
                doc = prev
        except (OSError, ValueError):
            doc = {}
    doc.update(
        {
            "command": command,
            "argv": [sys.executable, *sys.argv],
            "scale": args.scale,
            "seed": args.seed,
            "preset": {k: v for k, v in preset.__dict__.items()},
            "machine": machine_info(),
            "started": started.isoformat(),
        }
    )
    doc.setdefault("experiments", {})
    t0 = time.perf_counter()

    def save(name: str, res: Json) -> None:
        res["run"] = {"command": command, "finished": dt.datetime.now(dt.UTC).isoformat()}
        doc["experiments"][name] = res
        path.write_text(json.dumps(doc, indent=1, default=_json_default))

    try:
        run_experiments(preset, args.only, data_dir, seed=args.seed, on_result=save)
    except SSBJError as exc:
        print(f"ssbj bench: {exc}", file=sys.stderr)
        return 2
    doc["finished"] = dt.datetime.now(dt.UTC).isoformat()
    doc["seconds"] = time.perf_counter() - t0
    doc["machine"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    doc["summary"] = summarize(doc["experiments"])
    path.write_text(json.dumps(doc, indent=1, default=_json_default))
    if args.save_calibration is not None:
        calib = doc["experiments"].get("calibration")
        if calib is None:
            print("ssbj bench: --save-calibration needs the calibration experiment", file=sys.stderr)
            return 2
        CostConstants(**calib["constants_ns"]).save(args.save_calibration)
        print(f"cost-model constants of this machine written to {args.save_calibration}")
    write_report(doc, out / "README.md")
    pngs = [] if args.no_plots else _plots(doc["experiments"], out)
    print(
        f"ssbj bench --scale {args.scale}: {doc['seconds']:.0f}s, results in {path}"
        + (f", {len(pngs)} plots" if pngs else "")
    )
    _print_summary(doc["summary"], sys.stdout)
    return 0


def _command(args: argparse.Namespace) -> str:
    """Return the ``ssbj bench`` command line equivalent to ``args`` (raw argv is kept too)."""
    parts = ["ssbj", "bench", "--scale", args.scale]
    if args.only:
        parts += ["--only", *args.only]
    parts += ["--out", str(args.out)]
    if args.data_dir is not None:
        parts += ["--data-dir", str(args.data_dir)]
    if args.seed:
        parts += ["--seed", str(args.seed)]
    if args.no_plots:
        parts.append("--no-plots")
    if args.save_calibration is not None:
        parts += ["--save-calibration", str(args.save_calibration)]
    return shlex.join(parts)


def _plots(exps: dict[str, Json], out: Path) -> list[Path]:
    from ssbj.bench.plots import plot_all  # optional extra (matplotlib): imported only when plotting

    return plot_all(exps, out)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
