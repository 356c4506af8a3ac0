"""ssbj.files: the atomic Parquet output shared by ``ssbj join`` and ``ssbj query``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ssbj import files
from ssbj.errors import ConfigError, ServiceError

SCHEMA = pa.schema([("a", pa.int64())])


def batches(sizes: list[int]) -> Iterator[pa.Table]:
    start = 0
    for n in sizes:
        yield pa.table({"a": pa.array(range(start, start + n), pa.int64())})
        start += n


def test_rows_in_order_in_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "ROW_GROUP_ROWS", 5)
    out = tmp_path / "out.parquet"
    assert files.write_parquet_atomically(batches([3, 0, 4, 2, 1]), SCHEMA, out) == 10
    got = pq.ParquetFile(out)
    assert got.read().column("a").to_pylist() == list(range(10))
    assert got.metadata.num_row_groups == 2  # 3+0+4 reached 5, then the rest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet"]


def test_no_rows_still_writes_a_file_with_the_schema(tmp_path: Path) -> None:
    out = tmp_path / "empty.parquet"
    assert files.write_parquet_atomically(iter(()), SCHEMA, out) == 0
    assert pq.read_table(out).schema == SCHEMA


def test_failure_midway_leaves_neither_output_nor_temporary(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"

    def failing() -> Iterator[pa.Table]:
        yield from batches([4])
        raise OSError("No space left on device")

    with pytest.raises(ServiceError, match=r"cannot write output .*out\.parquet: No space left"):
        files.write_parquet_atomically(failing(), SCHEMA, out)
    assert list(tmp_path.iterdir()) == []


def test_an_output_that_cannot_be_opened_is_a_config_error(tmp_path: Path) -> None:
    out = tmp_path / "missing-dir" / "out.parquet"
    with pytest.raises(ConfigError, match=r"cannot write --output .*missing-dir"):
        files.write_parquet_atomically(batches([1]), SCHEMA, out, "--output")
