#!/usr/bin/env bash
# Install everything (Debian packages, Python packages incl. Spark, Kafka client and the Tansu
# broker), then lint (ruff), type-check (mypy on ssbj/) and test (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/setup.sh dev
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest "$@"
