"""``ssbj run``, ``ssbj validate`` and ``ssbj check`` of a continuous-query job file (one with ``query:``)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ssbj.config_cq import load_cq_config
from ssbj.pipeline.cq_job import CqJob, validate_cq_job
from ssbj.pipeline.cq_quality import check_result


class CqProgress:
    """One line per micro-batch on stderr."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self, p: dict[str, Any]) -> None:
        """Show one progress record."""
        t = p["totals"]
        sys.stderr.write(
            f"[{time.monotonic() - self.t0:7.1f}s] batch {p['batch_id']}: {t['records_in']:,} records, "
            f"{t['applied']:,} changes applied, {t['dead_letters']:,} dead letters, {p['result_rows']:,} groups\n"
        )


def cmd_run(args: argparse.Namespace, setup_logging: Any) -> int:
    """``ssbj run --config cq-job.yaml``."""
    cfg = load_cq_config(args.config)
    setup_logging(args.log_level)
    job = CqJob(cfg, on_progress=None if args.quiet else CqProgress())

    def _stop(signum: int, _frame: Any) -> None:
        job.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    summary = job.run()
    job.processor.close()
    t = summary.totals
    result = {
        "job": cfg.name,
        "batches": summary.batches,
        "restarts": summary.restarts,
        "totals": t.__dict__,
        "reconciled": t.reconciled,
    }
    if args.summary:
        Path(args.summary).write_text(json.dumps(result, indent=2))
    print(
        f"{cfg.name}: {summary.batches} batches, {t.records_in:,} records -> {t.changes:,} changes "
        f"({t.applied:,} applied, {t.dead_letters:,} dead letters, {t.tombstones:,} tombstones), "
        f"{t.delta_rows:,} delta rows"
    )
    return 0 if t.reconciled else 1


def cmd_validate(args: argparse.Namespace) -> int:
    """``ssbj validate cq-job.yaml``."""
    for line in validate_cq_job(load_cq_config(args.config)):
        print(line)
    print(f"{args.config}: OK")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """``ssbj check cq-job.yaml``: the suite on the maintained result table."""
    result = check_result(load_cq_config(args.config))
    print(result.summary())
    return 0 if result.success else 1
