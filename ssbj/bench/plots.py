"""PNG plots of the benchmark results (matplotlib, Agg backend), one or two per experiment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter

__all__ = ["PLOTTERS", "plot_all"]

Json = dict[str, Any]
_COLORS = {"ssbj": "tab:blue", "meshjoin": "tab:red", "pyarrow": "tab:green"}
_LABELS = {"ssbj": "SSBJ", "meshjoin": "MESHJOIN"}


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _ok(points: list[Json]) -> list[Json]:
    return [p for p in points if "error" not in p]


def _whiskers(ax: Any, xs: list[float], ys: list[float], reps: list[Any], color: str) -> None:
    """Min-max range over the repetitions of each point (when there were several)."""
    lo = [y - min(r) if r and len(r) > 1 else 0.0 for y, r in zip(ys, reps, strict=True)]
    hi = [max(r) - y if r and len(r) > 1 else 0.0 for y, r in zip(ys, reps, strict=True)]
    if any(lo) or any(hi):
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor=color, alpha=0.6, capsize=3)


def _rate_lines(ax: Any, xs: list[float], points: list[Json], key: str = "service_rate") -> None:
    for algo in ("ssbj", "meshjoin"):
        ys = [pt[algo][key] for pt in points]
        ax.plot(xs, ys, marker="o", color=_COLORS[algo], label=_LABELS[algo])
        _whiskers(ax, xs, ys, [pt[algo].get(f"rep_{key}") for pt in points], _COLORS[algo])
    for x, pt in zip(xs, points, strict=True):
        r = pt.get("ratio_service_rate")
        if r:
            top = max(pt["ssbj"][key], pt["meshjoin"][key])
            ax.annotate(f"{r:.2f}x", (x, top), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    ax.set_ylabel("service rate (tuples/s)  [labels: SSBJ/MESHJOIN]")
    ax.set_yscale("log")
    ax.margins(x=0.06, y=0.12)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()


def plot_fig4a(res: Json, out: Path) -> list[Path]:
    """Memory against service rate."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for algo in ("ssbj", "meshjoin"):
        pts = sorted(res["series"][algo], key=lambda p: p["chunk_bytes"])  # in the order of the sweep
        xs = [p["service_rate"] for p in pts]
        ax.plot(
            xs,
            [p["memory_mean"] / 2**20 for p in pts],
            marker="o",
            color=_COLORS[algo],
            label=f"{_LABELS[algo]} (reported total)",
        )
        ax.plot(
            xs,
            [p["tuple_memory_mean"] / 2**20 for p in pts],
            marker="x",
            ls="--",
            color=_COLORS[algo],
            label=f"{_LABELS[algo]} (H_S + H_R + buffers)",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("service rate (tuples/s)")
    ax.set_ylabel("memory (MiB)")
    ax.set_title(f"Fig. 4a: memory vs service rate, |R|={res['dataset']['r_rows']:,}, skew 1")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return [_save(fig, out / "fig4a.png")]


def plot_fig5a(res: Json, out: Path) -> list[Path]:
    """Service rate against memory."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    pts = _ok(res["points"])
    _rate_lines(ax, [100 * p["memory_fraction"] for p in pts], pts)
    ax.set_xlabel("memory (% of projected R)")
    ax.set_title(f"Fig. 5a: service rate vs memory, |R|={res['dataset']['r_rows']:,}, skew 1")
    return [_save(fig, out / "fig5a.png")]


def plot_fig5b(res: Json, out: Path) -> list[Path]:
    """Service rate against |R|."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    pts = _ok(res["points"])
    _rate_lines(ax, [p["r_rows"] / 1e6 for p in pts], pts)
    ax.set_xlabel("|R| (million tuples)")
    ax.set_title(f"Fig. 5b: service rate vs |R|, memory {res['budget'] / 2**20:.1f} MiB, skew 1")
    return [_save(fig, out / "fig5b.png")]


def plot_fig5c(res: Json, out: Path) -> list[Path]:
    """Service rate against skew."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    pts = _ok(res["points"])
    _rate_lines(ax, [p["skew"] for p in pts], pts)
    ax.set_xlabel("skew (Zipf exponent)")
    ax.set_title(f"Fig. 5c: service rate vs skew, memory {100 * res['memory_fraction']:.0f}% of R")
    return [_save(fig, out / "fig5c.png")]


def plot_fig5d(res: Json, out: Path) -> list[Path]:
    """TPC-H service rate against memory."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    pts = _ok(res["points"])
    _rate_lines(ax, [100 * p["memory_fraction"] for p in pts], pts)
    ax.set_xlabel("memory (% of projected customer)")
    ax.set_title(f"Fig. 5d: TPC-H orders x customer, SF {res['dataset'].get('scale', '?')}")
    return [_save(fig, out / "fig5d.png")]


def plot_fig5f(res: Json, out: Path) -> list[Path]:
    """Share of tuples served by the cache against memory."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    pts = res["points"]
    xs = [f"{100 * p['memory_fraction']:g}%" for p in pts]
    ys = [100 * p["cache_share"] for p in pts]
    ax.bar(xs, ys, color=_COLORS["ssbj"])
    for i, y in enumerate(ys):
        ax.annotate(f"{y:.0f}%", (i, y), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_xlabel("memory (% of projected R)")
    ax.set_ylabel("stream tuples served by the cache (%)")
    ax.set_title("Fig. 5f: role of the cache (skew 1)")
    return [_save(fig, out / "fig5f.png")]


def plot_fig6a(res: Json, out: Path) -> list[Path]:
    """Service rate against the switching factor."""
    if not res["points"]:
        return []
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    pts = res["points"]
    xs = [p["switch_factor"] for p in pts]
    ys = [p["service_rate"] for p in pts]
    ax.plot(xs, ys, marker="o", color=_COLORS["ssbj"], label="SSBJ")
    _whiskers(ax, xs, ys, [p.get("rep_service_rate") for p in pts], _COLORS["ssbj"])
    ax.axhline(res["meshjoin_service_rate"], color=_COLORS["meshjoin"], ls="--", label="MESHJOIN")
    ax.set_ylim(bottom=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("switching factor s_f")
    ax.set_ylabel("service rate (tuples/s)")
    ax.set_title(f"Fig. 6a: switching factor, memory {100 * res['memory_fraction']:g}% of R, skew 1")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return [_save(fig, out / "fig6a.png")]


def plot_fig6cd(res: Json, out: Path) -> list[Path]:
    """Predicted against measured c_loop per step, one figure per skew (6c: 0, 6d: 1)."""
    paths = []
    for skew, name in (("0", "fig6c"), ("1", "fig6d")):
        per = res["skews"].get(skew)
        if per is None or "error" in per:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for algo in ("ssbj", "meshjoin"):
            st = per[algo]["steps"]
            xs = list(range(len(st)))
            ax.plot(
                xs,
                [1e3 * s["c_loop_measured"] for s in st],
                color=_COLORS[algo],
                lw=0.8,
                label=f"{_LABELS[algo]} measured",
            )
            ax.plot(
                xs,
                [1e3 * s["c_loop_predicted"] for s in st],
                color=_COLORS[algo],
                lw=1.2,
                ls="--",
                label=f"{_LABELS[algo]} predicted (err {100 * per[algo]['median_abs_rel_error']:.0f}%)",
            )
        ax.set_xlabel("measured step (subsampled)")
        ax.set_ylabel("c_loop (ms)")
        ax.set_title(f"Fig. 6{name[-1]}: cost model validation, skew {skew}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        paths.append(_save(fig, out / f"{name}.png"))
    return paths


def plot_hashjoin(res: Json, out: Path) -> list[Path]:
    """SSBJ with memory for all of R against a one-shot pyarrow hash join."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    pj = res["pyarrow"]
    labels = ["SSBJ\nservice", "SSBJ\nend-to-end", "MESHJOIN\nservice", "pyarrow\n1 thread", "pyarrow\nthreads"]
    vals = [
        res["ssbj"]["service_rate"],
        res["ssbj"]["e2e_rate_wall"],
        res["meshjoin"]["service_rate"],
        pj["single_thread"]["rate_wall"],
        pj["threads"]["rate_wall"],
    ]
    colors = [_COLORS["ssbj"], _COLORS["ssbj"], _COLORS["meshjoin"], _COLORS["pyarrow"], _COLORS["pyarrow"]]
    ax.bar(labels, [v / 1e6 for v in vals], color=colors)
    ax.axhline(pj["threads"]["rate_wall"] / 2e6, color="k", ls=":", label="target: half of pyarrow's default join")
    ax.set_ylabel("million stream tuples/s (wall)")
    ax.set_title(f"Memory for all of R ({res['budget_factor']:g}x projected R), skew 1")
    ax.legend(fontsize=8)
    return [_save(fig, out / "hashjoin.png")]


def plot_throughput(res: Json, out: Path) -> list[Path]:
    """Tuples per CPU second of the data plane."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    labels = []
    vals = []
    colors = []
    for cfg, per in res["configs"].items():
        for algo in ("ssbj", "meshjoin"):
            labels.append(f"{_LABELS[algo]}\n{cfg.replace('_', ' ')}")
            vals.append(per[algo]["tuples_per_cpu_second"] / 1e6)
            colors.append(_COLORS[algo])
    ax.bar(labels, vals, color=colors)
    ax.axhline(1.0, color="k", ls=":", label="target: 1M tuples/s per core")
    ax.set_ylabel("million stream tuples per CPU second")
    ax.set_title("Data-plane throughput at skew 1")
    ax.legend(fontsize=8)
    return [_save(fig, out / "throughput.png")]


PLOTTERS: dict[str, Callable[[Json, Path], list[Path]]] = {
    "fig4a": plot_fig4a,
    "fig5a": plot_fig5a,
    "fig5b": plot_fig5b,
    "fig5c": plot_fig5c,
    "fig5d": plot_fig5d,
    "fig5f": plot_fig5f,
    "fig6a": plot_fig6a,
    "fig6cd": plot_fig6cd,
    "hashjoin": plot_hashjoin,
    "throughput": plot_throughput,
}


def plot_all(experiments: dict[str, Json], out: Path) -> list[Path]:
    """Draw every experiment that has a plotter; returns the PNG paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for name, res in experiments.items():
        fn = PLOTTERS.get(name)
        if fn is not None:
            paths.extend(fn(res, out))
    return paths
