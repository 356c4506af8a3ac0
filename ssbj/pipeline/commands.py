"""The job commands of ``ssbj``.

``run``, ``validate``, ``quickstart``, ``sql``, ``check``, ``gate``, ``publish`` and ``quarantine``.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from ssbj import warehouse
from ssbj.config import DatabaseSink, JobConfig, MultiWayJobConfig, load_any_config, load_config
from ssbj.config_cq import is_cq_file
from ssbj.core.operator import StepResult
from ssbj.errors import ConfigError
from ssbj.logs import FieldsFormatter
from ssbj.pipeline import cq_commands
from ssbj.pipeline.audit import Warehouse, gate_table_names
from ssbj.pipeline.factory import MasterSource, validate_job
from ssbj.pipeline.job import EnrichmentJob
from ssbj.pipeline.multicommands import cmd_run_multi, cmd_validate_multi
from ssbj.pipeline.multiway_quality import validate_multiway_job
from ssbj.pipeline.orchestration import check_job, gate_job
from ssbj.pipeline.quality import result_path
from ssbj.pipeline.quickstart import add_command


def add_commands(sub: Any) -> None:
    """Register the job commands (run, validate, quickstart, sql, check, gate, publish, quarantine)."""
    run = sub.add_parser(
        "run",
        help="run a streaming enrichment job from a YAML config (Spark; also under spark-submit)",
        description="Run the job described by --config until its input is exhausted (available-now) or it is stopped.",
    )
    run.add_argument("--config", required=True, nargs="+", help="job file (YAML); several: one shared application")
    run.add_argument("--checkpoint", help="with several job files: the application's checkpoint directory")
    run.add_argument("--quiet", action="store_true", help="no progress display")
    run.add_argument("--log-level", default="WARNING", help="level of the JSON log lines on stderr (default WARNING)")
    run.add_argument("--summary", help="write the run summary (JSON) to this file")
    run.add_argument("--run-id", help="record this run in the audit table under this id (e.g. Airflow's run_id)")
    run.set_defaults(handler=lambda a, _extra: cmd_run(a))
    val = sub.add_parser(
        "validate",
        help="check a job file: fields, connections, master table, key and columns",
        description="Validate a job file, connect to its master database, sinks and source, and report.",
    )
    val.add_argument("config", nargs="+", help="job file (YAML); several: also whether they can share one application")
    val.set_defaults(handler=lambda a, _extra: cmd_validate(a))

    add_command(sub)
    sql = sub.add_parser(
        "sql",
        help="print the warehouse DDL (the demo's, or a job's with --config) for a dialect",
        description="Print CREATE TABLE/INDEX statements rendered from ssbj/warehouse.py.",
    )
    sql.add_argument("--dialect", required=True, help="mysql, postgresql or sqlite")
    sql.add_argument("--config", help="job file: its tables and output columns (reads the master table's columns)")
    sql.set_defaults(handler=lambda a, _extra: cmd_sql(a))
    chk = sub.add_parser(
        "check",
        help="run the data-quality suite (Great Expectations) on a run's enriched rows",
        description="Validate the warehouse rows of one run; store the result as JSON; exit 1 if a check fails.",
    )
    chk.add_argument("config", help="job file (YAML)")
    chk.add_argument("--run-id", help="the run (as given to ssbj run --run-id); not for a continuous query")
    chk.set_defaults(handler=lambda a, _extra: cmd_check(a))
    gate = sub.add_parser(
        "gate",
        help="publish a checked run, or quarantine it and fail with the summary",
        description="After ssbj check: publish the run's rows if every check passed, else quarantine them, exit 1.",
    )
    gate.add_argument("config", help="job file (YAML)")
    gate.add_argument("--run-id", required=True, help="the run (as given to ssbj run --run-id)")
    gate.set_defaults(handler=lambda a, _extra: cmd_gate(a))
    for name, what in (
        ("publish", "copy a run's enriched rows into the published table (after its checks passed)"),
        ("quarantine", "copy a run's enriched rows into the quarantine table"),
    ):
        p = sub.add_parser(name, help=what, description=what[0].upper() + what[1:] + ".")
        p.add_argument("config", help="job file (YAML)")
        p.add_argument("--run-id", required=True, help="the run (as given to ssbj run --run-id)")
        if name == "quarantine":
            p.add_argument("--reason", required=True, help="why (stored with every row)")
        p.set_defaults(handler=lambda a, _extra, n=name: cmd_move(a, n))


def _fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f}M/s" if x >= 1e6 else f"{x / 1e3:.1f}k/s"


class ProgressDisplay:
    """One line per micro-batch on stderr (rewritten in place on a terminal).

    It is also the job's :class:`~ssbj.pipeline.observe.StepObserver`: on a terminal, a long
    batch shows its steps (R-cycle, partition, stream tuples read) as they happen.
    """

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out
        self.tty = out.isatty()
        self.t0 = time.monotonic()
        self._step_shown = 0.0

    def on_step(self, result: StepResult) -> None:
        """Show the step on a terminal, at most 4 times a second."""
        now = time.monotonic()
        if not self.tty or now - self._step_shown < 0.25:
            return
        self._step_shown = now
        m = result.metrics
        self.out.write(
            f"\r\x1b[2K[{now - self.t0:7.1f}s] step {m.step}: R-cycle {m.r_cycle} part {m.partition + 1}/"
            f"{m.partitions}, {m.w:,} tuples read, waiting {m.hs_tuples:,}"
        )
        self.out.flush()

    def before_partition_read(self, partition: int) -> None:
        """Partition reads show up as steps."""

    def after_partition_read(self, partition: int, rows: int, seconds: float) -> None:
        """Partition reads show up as steps."""

    def __call__(self, p: dict[str, Any]) -> None:
        """Show one progress record."""
        t = p["totals"]
        part = f"{p['partition'] + 1}/{p['partitions']}" if p.get("partitions") else "-"
        line = (
            f"[{time.monotonic() - self.t0:7.1f}s] {p['event']} {p['batch_id']}.{p['segment']}: "
            f"{t['records_in']:,} records, {t['output_rows']:,} rows out, {t['dead_letters']:,} dead letters, "
            f"waiting {p['waiting_tuples']:,}, R-cycle {p['r_cycle']} part {part}, "
            f"cache {p['cache_hit_share']:.0%}, service {_fmt_rate(p['service_rate'])}"
        )
        if self.tty:
            self.out.write("\r\x1b[2K" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def close(self) -> None:
        """End the in-place line."""
        if self.tty:
            self.out.write("\n")


def _setup_logging(level: str) -> None:
    lvl = logging.getLevelName(level.upper())
    if not isinstance(lvl, int):
        raise ConfigError(f"bad --log-level {level!r}: use DEBUG, INFO, WARNING or ERROR")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FieldsFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=lvl, handlers=[handler])
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.ERROR)


def cmd_run(args: argparse.Namespace) -> int:
    """``ssbj run --config job.yaml`` (several files: :func:`cmd_run_multi`)."""
    if len(args.config) > 1 or args.checkpoint:
        return cmd_run_multi(args, _setup_logging)
    args.config = args.config[0]  # one job file from here on, of any kind
    if is_cq_file(args.config):
        return cq_commands.cmd_run(args, _setup_logging)
    cfg = load_any_config(args.config)
    _setup_logging(args.log_level)

    display = None if args.quiet else ProgressDisplay()
    job = EnrichmentJob(cfg, on_progress=display, run_id=args.run_id, observer=display)

    def _stop(signum: int, _frame: Any) -> None:
        job.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    summary = job.run()
    if display is not None:
        display.close()
    c = summary.counts
    result = {
        "job": cfg.name,
        "batches": summary.batches,
        "drained": summary.drained,
        "restarts": summary.restarts,
        "counts": c.to_dict(),
        "reconciled": c.reconciled,
    }
    streams = summary.last_progress.get("streams")  # a window join of two streams: counts per stream
    if streams:
        result["streams"] = streams
    if args.summary:
        Path(args.summary).write_text(json.dumps(result, indent=2))
    matched, unmatched = ("output", "dropped") if isinstance(cfg, MultiWayJobConfig) else ("matched", "unmatched")
    print(
        f"{cfg.name}: {summary.batches} batches, {c.records_in:,} records -> {c.output_rows:,} enriched rows "
        f"({c.matched_source_rows:,} {matched}, {c.unmatched_source_rows:,} {unmatched}, "
        f"{c.dead_letters:,} dead letters, {c.waiting:,} waiting)"
    )
    for st in (streams or {}).values():
        print(
            f"  stream {st['stream']}: {st['records_in']:,} records = {st['output_source_rows']:,} output + "
            f"{st['dropped_source_rows']:,} dropped + {st['waiting']:,} waiting + {st['dead_letters']:,} dead letters "
            f"({st['late']:,} late)"
        )
    if streams and not all(st["reconciled"] for st in streams.values()):
        return 1
    return 0 if result["reconciled"] else 1


def cmd_validate(args: argparse.Namespace) -> int:
    """``ssbj validate job.yaml`` (several files: :func:`cmd_validate_multi`)."""
    if len(args.config) > 1:
        return cmd_validate_multi(args.config)
    args.config = args.config[0]  # one job file from here on, of any kind
    if is_cq_file(args.config):
        return cq_commands.cmd_validate(args)
    cfg = load_any_config(args.config)

    for line in validate_multiway_job(cfg) if isinstance(cfg, MultiWayJobConfig) else validate_job(cfg):
        print(line)
    print(f"{args.config}: OK")
    return 0


def describe(cfg: JobConfig) -> str:
    """One line naming the job's parts (no secrets)."""
    src = cfg.source
    where = src.path if src.kind == "files" else f"{src.topic}@{src.display()}"
    return f"{cfg.name}: {src.kind} {where} -> {cfg.master.table} ({cfg.master.display()}) -> {cfg.sink.kind}"


def cmd_sql(args: argparse.Namespace) -> int:
    """``ssbj sql --dialect D [--config job.yaml]``."""
    if args.config is None:
        md = warehouse.demo_metadata()
    else:
        cfg = load_config(args.config)

        if not isinstance(cfg.sink, DatabaseSink):
            raise ConfigError("ssbj sql --config needs a job whose sink is a database table")
        master = MasterSource(cfg).schema()
        out = warehouse.output_schema(cfg.stream_schema, master, list(cfg.join_settings(master).master_columns or ()))
        dl = cfg.dead_letter.table if isinstance(cfg.dead_letter, DatabaseSink) else f"{cfg.sink.table}_dead_letters"
        md = warehouse.job_metadata(out, cfg.sink.table, dl, *gate_table_names(cfg))
    sys.stdout.write(warehouse.render(md, args.dialect))
    return 0


def cmd_move(args: argparse.Namespace, target: str) -> int:
    """``ssbj publish|quarantine job.yaml --run-id X``."""
    cfg = load_any_config(args.config)
    wh = Warehouse(cfg)
    if target == "publish":
        n = wh.publish(args.run_id)
        print(f"{cfg.name} run {args.run_id}: {n:,} rows published to {wh.published_name}")
    else:
        n = wh.quarantine(args.run_id, args.reason)
        print(f"{cfg.name} run {args.run_id}: {n:,} rows quarantined in {wh.quarantine_name}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """``ssbj check job.yaml --run-id X`` (a continuous query: ``ssbj check cq-job.yaml``)."""
    if is_cq_file(args.config):
        return cq_commands.cmd_check(args)
    if args.run_id is None:
        raise ConfigError("ssbj check: --run-id is required for an enrichment job")
    result = check_job(args.config, args.run_id)
    print(result.summary())
    print(f"result: {result_path(load_any_config(args.config), args.run_id)}")
    return 0 if result.success else 1


def cmd_gate(args: argparse.Namespace) -> int:
    """``ssbj gate job.yaml --run-id X``."""
    outcome = gate_job(args.config, args.run_id)
    print(outcome.message, file=sys.stdout if outcome.published else sys.stderr)
    return 0 if outcome.published else 1
