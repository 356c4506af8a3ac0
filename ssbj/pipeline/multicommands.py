"""``ssbj run --config a.yaml b.yaml ... --checkpoint DIR`` and ``ssbj validate a.yaml b.yaml ...``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from ssbj.config import load_config
from ssbj.errors import ConfigError
from ssbj.pipeline import multiconf
from ssbj.pipeline.factory import validate_job
from ssbj.pipeline.multijob import MultiJob


def _line(p: dict[str, Any]) -> str:
    out = sum(p["output_rows"].values())
    where = p["source"] or "all sources"
    waiting = sum(p["waiting_tuples"].values())
    return (
        f"{p['event']} {p['checkpoint_id']} ({where}): {p['records_in']:,} records, {out:,} rows out over "
        f"{len(p['output_rows'])} jobs, {waiting:,} waiting, {p['epochs']} epoch(s), "
        f"memory {p['memory_bytes'] / 1e6:.1f} MB"
    )


def cmd_run_multi(args: argparse.Namespace, setup_logging: Any) -> int:
    """Several job files in one Spark application (docs/shared.md)."""
    if not args.checkpoint:
        raise ConfigError(
            "several job files run as one application with one checkpoint: give --checkpoint DIR "
            "(keep it when jobs are added or removed: the switch happens there)"
        )
    cfgs = [load_config(p) for p in args.config]
    setup_logging(args.log_level)

    def show(p: dict[str, Any]) -> None:
        print(_line(p), file=sys.stderr, flush=True)

    job = MultiJob(cfgs, args.checkpoint, on_progress=None if args.quiet else show, run_id=args.run_id)

    def _stop(signum: int, _frame: Any) -> None:
        job.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    summary = job.run()
    result = {
        "jobs": {n: {"counts": c.to_dict(), "reconciled": c.reconciled} for n, c in summary.counts.items()},
        "calls": summary.calls,
        "drained": summary.drained,
        "restarts": summary.restarts,
        "switched": summary.switched,
    }
    if args.summary:
        Path(args.summary).write_text(json.dumps(result, indent=2))
    for n, c in summary.counts.items():
        print(
            f"{n}: {c.records_in:,} records -> {c.output_rows:,} enriched rows ({c.matched_source_rows:,} matched, "
            f"{c.unmatched_source_rows:,} unmatched, {c.dead_letters:,} dead letters, {c.waiting:,} waiting)"
        )
    return 0 if all(c.reconciled for c in summary.counts.values()) else 1


def cmd_validate_multi(paths: list[str]) -> int:
    """Each job file as ``ssbj validate`` checks it, then whether they can share one application."""
    cfgs = [load_config(p) for p in paths]
    for p, cfg in zip(paths, cfgs, strict=True):
        for line in validate_job(cfg):
            print(f"{cfg.name}: {line}")
        print(f"{p}: OK")
    js = multiconf.check(cfgs, "the job files")
    for sid, names in js.sources.items():
        print(f"shared source {sid}: decoded once for {', '.join(names)} (keys {', '.join(js.keys(sid))})")
    for mid, names in js.masters.items():
        print(f"shared scan {mid}: {', '.join(names)}")
    print(f"{len(cfgs)} jobs: OK to run in one application")
    return 0
