"""Every database user of a job gets its engine from ssbj.credentials: one engine per database URL.

A run is loaded without Spark (the processor fed with the landed files, as the job's
foreachBatch does), then `ssbj check` and `ssbj validate` run while a SQLAlchemy event
records every engine that opens a connection, GX's included.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa

from ssbj import credentials
from ssbj.cli import main
from ssbj.config import JobConfig, load_config
from ssbj.core.checkpoint import DirectoryStore
from ssbj.pipeline.audit import Warehouse
from ssbj.pipeline.factory import build_processor
from ssbj.pipeline.quickstart import write_demo
from ssbj.pipeline.records import decode_files


def _load_run(cfg: JobConfig, landing: Path, run_id: str) -> None:
    proc = build_processor(cfg, DirectoryStore(Path(cfg.checkpoint) / "operator"))
    wh = Warehouse(cfg)
    wh.begin_run(run_id, proc.position())
    files = sorted(landing.glob("*.jsonl"))
    for batch_id, f in enumerate(files):
        raw = pa.table({"path": [str(f)], "content": [f.read_bytes()]})
        proc.process(batch_id, lambda raw=raw: decode_files(raw, "jsonl", cfg.stream_schema, cfg.join.stream_key))
    while proc.drain(lambda _b: True) is not None:
        pass
    wh.finish_run(run_id, proc.position(), proc.counts(), 1.0)


def _engines_of(found: set[str]) -> dict[str, int]:
    by_url: dict[str, int] = {}
    for entry in found:
        url = entry.split(":", 1)[1]
        by_url[url] = by_url.get(url, 0) + 1
    return by_url


def test_check_and_validate_open_one_engine_per_database_url(tmp_path: Path) -> None:
    pytest.importorskip("great_expectations")
    job = write_demo(tmp_path, customers=300, orders=3_000, files=2, seed=5)
    cfg = load_config(job)
    _load_run(cfg, tmp_path / "landing", "r1")
    master_url = f"sqlite:///{(tmp_path / 'master.db').resolve()}"
    warehouse_url = f"sqlite:///{(tmp_path / 'warehouse.db').resolve()}"

    credentials.dispose_engines()
    seen: dict[int, str] = {}

    def on_connect(conn: sa.Connection) -> None:
        seen[id(conn.engine)] = conn.engine.url.render_as_string(hide_password=True)

    sa.event.listen(sa.Engine, "engine_connect", on_connect)
    try:
        assert main(["check", str(job), "--run-id", "r1"]) == 0  # GX suite + reconciliation on real rows
        # the warehouse (enriched, audit, dead letters, GX) and the master (its NOT NULL columns)
        assert _engines_of({f"{k}:{v}" for k, v in seen.items()}) == {warehouse_url: 1, master_url: 1}
        seen.clear()
        credentials.dispose_engines()
        assert main(["validate", str(job)]) == 0  # master, sink and dead-letter sink (same URL)
        assert _engines_of({f"{k}:{v}" for k, v in seen.items()}) == {warehouse_url: 1, master_url: 1}
    finally:
        sa.event.remove(sa.Engine, "engine_connect", on_connect)
        credentials.dispose_engines()


def test_the_sink_and_the_audit_share_the_engine_of_their_url(tmp_path: Path) -> None:
    job = write_demo(tmp_path, customers=50, orders=200, files=1, seed=2)
    cfg = load_config(job)
    credentials.dispose_engines()
    try:
        proc = build_processor(cfg, DirectoryStore(tmp_path / "checkpoint" / "operator"))
        proc.open()
        wh = Warehouse(cfg)
        # the enriched sink, the dead-letter sink and the audit table live in one SQLite file
        assert proc.sink._engine is wh.engine  # type: ignore[attr-defined]
        assert proc.dead_letter_sink._engine is wh.engine  # type: ignore[attr-defined]
    finally:
        credentials.dispose_engines()
