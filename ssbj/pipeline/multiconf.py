"""Several job files run as one Spark application: which of them can share, and the checks.

Jobs share what they have in common: a *source* (the same Kafka topic at the same broker,
or the same landing directory) is read by one streaming query and decoded once per
micro-batch, so jobs reading it must configure it identically and declare the same
record schema; a *master* (the same table, database and key) is scanned once per key.
Every job keeps its own sink, dead letters and audit row, so no two jobs may write the
same target. Settings of the one application (Spark, trigger, algorithm) must agree.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ssbj.config import DatabaseSink, JobConfig, ParquetSink, parse_config
from ssbj.errors import ConfigError
from ssbj.shared.operator import MAX_JOBS


def source_id(cfg: JobConfig) -> str:
    """Identity of a job's source: the topic at its broker, or the landing directory."""
    src = cfg.source
    if src.kind == "kafka":
        return f"kafka:{src.display()}/{src.topic}"
    return f"files:{Path(src.path).resolve()}"


def source_dir(sid: str) -> str:
    """Return a file-name-safe, stable directory name for a source (its Spark checkpoint)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", sid)[-40:].strip("_")
    return f"{slug}-{hashlib.sha1(sid.encode()).hexdigest()[:10]}"  # noqa: S324 - a name, not security


def master_id(cfg: JobConfig) -> str:
    """Identity of a job's master scan: database, table and key."""
    m = cfg.master
    return f"{m.display()}/{m.table}#{m.key}"


def _target(sink: DatabaseSink | ParquetSink) -> str:
    if isinstance(sink, ParquetSink):
        return f"parquet:{Path(sink.path).resolve()}"
    return f"table:{sink.display()}/{sink.table}"


def dump(cfg: JobConfig) -> str:
    """Return the job file as JSON text (no secrets: a job file names where they are), for the checkpoint.

    Text, not a mapping: the checkpoint's manifest sorts mapping keys, and the order of
    ``schema`` is the order of the output columns.
    """
    return cfg.model_dump_json(by_alias=True)


def load(text: str, origin: str) -> JobConfig:
    """Return a job from :func:`dump`'s text."""
    return parse_config(json.loads(text), origin)


@dataclass
class JobSet:
    """Jobs of one application, grouped by source and by master."""

    jobs: dict[str, JobConfig]
    sources: dict[str, list[str]] = field(default_factory=dict)  # source id -> job names
    masters: dict[str, list[str]] = field(default_factory=dict)  # master id -> job names

    @property
    def first(self) -> JobConfig:
        """The first job (the application's Spark and trigger settings are its)."""
        return next(iter(self.jobs.values()))

    def keys(self, sid: str) -> list[str]:
        """Distinct stream keys of the jobs reading source ``sid``."""
        return list(dict.fromkeys(self.jobs[n].join.stream_key for n in self.sources[sid]))


def check(cfgs: Iterable[JobConfig], origin: str = "jobs") -> JobSet:
    """Group ``cfgs``; raise ConfigError listing every incompatibility."""
    jobs: dict[str, JobConfig] = {}
    problems: list[str] = []
    for c in cfgs:
        if c.name in jobs:
            problems.append(f"two jobs are named {c.name!r}: job names identify outputs and audit rows")
        jobs[c.name] = c
    if not jobs:
        raise ConfigError(f"{origin}: no job given")
    if len(jobs) > MAX_JOBS:
        problems.append(f"at most {MAX_JOBS} jobs run in one application, got {len(jobs)}")
    out = JobSet(jobs)
    first = out.first
    for name, c in jobs.items():
        out.sources.setdefault(source_id(c), []).append(name)
        out.masters.setdefault(master_id(c), []).append(name)
        if c.join.placement != "driver":
            problems.append(f"{name}: join.placement {c.join.placement!r}: a shared run joins on the driver")
        if c.join.hybrid != "off":
            problems.append(f"{name}: join.hybrid {c.join.hybrid!r}: the shared operator has no lookup path")
        for what, mine, theirs in (
            ("spark", c.spark, first.spark),
            ("trigger", c.trigger, first.trigger),
            ("join.algorithm", c.join.algorithm, first.join.algorithm),
            ("join.switch_factor", c.join.switch_factor, first.join.switch_factor),
            ("join.eviction_interval", c.join.eviction_interval, first.join.eviction_interval),
            ("join.early_eviction", c.join.early_eviction, first.join.early_eviction),
            ("shared", c.shared, first.shared),
        ):
            if mine != theirs:
                problems.append(f"{name}: {what} differs from job {first.name!r}'s; one application has one {what}")
    for sid, names in out.sources.items():
        a = jobs[names[0]]
        for n in names[1:]:
            b = jobs[n]
            if b.source != a.source:
                problems.append(f"{n} and {a.name} read {sid} with different source settings (it is read once)")
            if b.schema_ != a.schema_:
                problems.append(f"{n} and {a.name} read {sid} with different schemas (it is decoded once)")
    for mid, names in out.masters.items():
        ma = jobs[names[0]].master
        for n in names[1:]:
            mb = jobs[n].master
            for attr in ("page_column", "partition_rows", "reader", "url", "url_env", "password_env", "connection_id"):
                if getattr(ma, attr) != getattr(mb, attr):
                    problems.append(f"{n} and {names[0]} scan {mid} with different master.{attr} (it is scanned once)")
    targets: dict[str, str] = {}
    for name, c in jobs.items():
        for what, sink in (("sink", c.sink), ("dead_letter", c.dead_letter)):
            t = _target(sink)
            if t in targets:
                problems.append(f"{name}: {what} {t} is also written by {targets[t]}; every job writes its own")
            targets[t] = f"{name} ({what})"
    if problems:
        raise ConfigError(f"{origin}: these jobs cannot run in one application:\n" + "\n".join(problems))
    return out
