"""The README's library example runs and prints what the README says."""

import contextlib
import io
import re
from pathlib import Path

import pyarrow as pa
import pytest

import ssbj

README = Path(__file__).resolve().parents[1] / "README.md"


def _enrich_block() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (block,) = [b for b in blocks if "ssbj.enrich(" in b]
    return block


def test_readme_enrich_example_runs_and_prints_its_comment() -> None:
    block = _enrich_block()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), {})  # noqa: S102  (our own README)
    expected = " ".join(line.lstrip("# ").strip() for line in block.splitlines() if line.startswith("# "))
    assert out.getvalue().strip() == expected


def test_enrich_inner_matches_a_batch_join_and_splits_batches() -> None:
    stream = pa.table({"k": [i % 7 for i in range(5000)], "v": list(range(5000))})
    master = pa.table({"id": [1, 2, 3, 3], "name": ["a", "b", "c", "c2"]})
    out = ssbj.enrich(stream, master, left_on="k", right_on="id", memory="8MB", batch_rows=333)
    expected = stream.join(master, keys="k", right_keys="id", join_type="inner")
    assert out.num_rows == expected.num_rows
    got = sorted(zip(out["v"].to_pylist(), out["name"].to_pylist(), strict=True))
    want = sorted(zip(expected["v"].to_pylist(), expected["name"].to_pylist(), strict=True))
    assert got == want


def test_enrich_rejects_bad_arguments() -> None:
    t = pa.table({"k": [1]})
    with pytest.raises(ssbj.InputError, match="no column 'nope'"):
        ssbj.enrich(t, pa.table({"id": [1]}), left_on="nope", right_on="id")
    with pytest.raises(ssbj.ConfigError, match="how must be"):
        ssbj.enrich(t, pa.table({"id": [1]}), left_on="k", right_on="id", how="outer")  # type: ignore[arg-type]
    with pytest.raises(ssbj.InputError, match="incompatible"):
        ssbj.enrich(t, pa.table({"id": ["1"]}), left_on="k", right_on="id")
