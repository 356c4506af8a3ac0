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
.venv/bin/pytest --durations=40 "$@"  # the slowest tests in every run: the suite must stay well inside CI's 90 minutes
