"""Every database user of a job gets its engine from ssbj.credentials: one engine per database URL.

A run is loaded without Spark (the processor fed with the landed files, as the job's
foreachBatch does), then `ssbj check` and `ssbj validate` run while a SQLAlchemy event
records every engine that opens a connection, GX's included.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def engines_opened() -> Iterator[dict[str, int]]:
    """Count, per URL, the engines that open a connection in the block (the engines are kept alive)."""
    engines: list[sa.Engine] = []
    by_url: dict[str, int] = {}

    def on_connect(conn: sa.Connection) -> None:
        if not any(e is conn.engine for e in engines):
            engines.append(conn.engine)
            url = conn.engine.url.render_as_string(hide_password=True)
            by_url[url] = by_url.get(url, 0) + 1

    credentials.dispose_engines()
    sa.event.listen(sa.Engine, "engine_connect", on_connect)
    try:
        yield by_url
    finally:
        sa.event.remove(sa.Engine, "engine_connect", on_connect)
        credentials.dispose_engines()


def test_run_check_and_validate_open_one_engine_per_database_url(tmp_path: Path) -> None:
    pytest.importorskip("great_expectations")
    job = write_demo(tmp_path, customers=100, orders=600, files=2, seed=5)
    cfg = load_config(job)
    urls = {
        f"sqlite:///{(tmp_path / 'master.db').resolve()}": 1,  # the master scan; the check's NOT NULL columns
        f"sqlite:///{(tmp_path / 'warehouse.db').resolve()}": 1,  # sinks, audit, gate tables, GX
    }
    with engines_opened() as opened:
        _load_run(cfg, tmp_path / "landing", "r1")  # master scan, both sinks, the audit row
    assert opened == urls
    with engines_opened() as opened:
        assert main(["check", str(job), "--run-id", "r1"]) == 0  # GX suite + reconciliation on real rows
    assert opened == urls
    with engines_opened() as opened:
        assert main(["validate", str(job)]) == 0
    assert opened == urls


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
