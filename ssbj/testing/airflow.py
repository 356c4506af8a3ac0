"""A throw-away Airflow home for running the shipped DAGs with ``airflow dags test``.

:func:`airflow_home` migrates an SQLite metadata database under ``home`` and returns the
environment every ``airflow`` call of a test then uses: the repository's ``dags/``, a Spark
connection to ``local[2]``, the running Python for Spark's driver and workers, and
whatever the caller adds (job-file variables, a warehouse connection).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ssbj.errors import ServiceError

BIN = Path(sys.executable).parent


def run_airflow(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``airflow ARGS`` of this Python's environment (15 min at most)."""
    return subprocess.run(  # noqa: S603 - our own executable, arguments from the caller
        [str(BIN / "airflow"), *args], env=env, capture_output=True, text=True, timeout=900, cwd=cwd
    )


def airflow_home(home: Path, dags: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Create an Airflow home at ``home`` for the DAGs in ``dags``; return its environment."""
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW_CONN_SSBJ_SPARK": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "SSBJ_PYTHON": sys.executable,
            **(extra or {}),
        }
    )
    res = run_airflow(env, "db", "migrate", cwd=dags.parent)
    if res.returncode != 0:
        raise ServiceError(f"airflow db migrate failed: {res.stderr[-3000:]}")
    return env
