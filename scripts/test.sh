#!/usr/bin/env bash
# Install everything (Debian packages, Python packages incl. Spark, Kafka client, the Tansu broker,
# Airflow and Great Expectations), then lint (ruff), type-check (mypy) and test (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/setup.sh dev
scripts/setup-airflow.sh .venv
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports  # the layers of docs/architecture.md (pyproject.toml [tool.importlinter])
# two pytest-xdist workers, a test at a time to whichever is free (no xdist_group is set; pytest 9.2
# ignores them anyway: xdist 3.8 renames items through an attribute pytest no longer reads). One process
# left a third to a half of the two cores idle. --durations prints the slowest tests in every run: the
# suite must stay well inside CI's 90 minutes
.venv/bin/pytest -n 2 --dist loadgroup --durations=40 "$@"
