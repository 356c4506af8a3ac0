#!/usr/bin/env bash
# Install ssbj with its dev extras, then lint (ruff), type-check (mypy on ssbj/) and test (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/pytest "$@"
