"""The layers of docs/architecture.md hold: imports run one way, adapters live under ssbj."""

import ast
import importlib.metadata as md
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# Function-local imports of ssbj modules that stay local on purpose: the module needs an
# optional extra at import time (pyspark for the Kafka data source, matplotlib for plots).
OPTIONAL_EXTRA_SHIMS = {"ssbj.adapters.kafka_source", "ssbj.bench.plots"}


def test_import_linter_layers_contract_is_kept() -> None:
    done = subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


def test_the_checked_graph_includes_the_adapters() -> None:
    graph = grimp.build_graph("ssbj", cache_dir=None)
    assert {"ssbj.adapters.sink_sql", "ssbj.adapters.master_sql", "ssbj.adapters.kafka_source"} <= graph.modules
    # the adapters import the bottom layer, and nothing imports up into the pipeline from them
    assert "ssbj.contracts" in graph.find_modules_directly_imported_by("ssbj.adapters.sink_sql")
    assert not graph.find_shortest_chain("ssbj.adapters.sink_sql", "ssbj.pipeline.processor")


def test_adapters_are_installed_under_ssbj_only() -> None:
    top_level = md.distribution("ssbj").read_text("top_level.txt") or ""
    assert top_level.split() == ["ssbj"]
    import ssbj.adapters.sql_common

    assert Path(ssbj.adapters.sql_common.__file__).resolve().parent == (ROOT / "adapters").resolve()


def _local_ssbj_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for fn in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ssbj"):
                found.append((node.lineno, node.module or ""))
            elif isinstance(node, ast.Import):
                found += [(node.lineno, a.name) for a in node.names if a.name.startswith("ssbj")]
    return found


def test_no_function_local_import_works_around_a_cycle() -> None:
    # ssbj/adapters is a symlink, which rglob does not follow: adapters/ is walked on its own
    paths = sorted([*(ROOT / "ssbj").rglob("*.py"), *(ROOT / "adapters").rglob("*.py")])
    assert {"sink_sql.py", "master_sql.py", "kafka_source.py"} <= {p.name for p in paths}
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {module}"
        for path in paths
        for line, module in _local_ssbj_imports(path)
        if module not in OPTIONAL_EXTRA_SHIMS
    ]
    assert offenders == []
