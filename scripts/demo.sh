#!/usr/bin/env bash
# Install ssbj and run the operator demo on generated data (no external services).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/ssbj demo "$@"
