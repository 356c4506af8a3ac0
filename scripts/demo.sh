#!/usr/bin/env bash
# Install ssbj with Spark and run a complete demo job with no external services:
# orders landing as JSON lines -> customers from SQLite -> a SQLite warehouse (exactly once).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/setup.sh spark
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
dir="${1:-demo-job}"
rm -rf "$dir"
.venv/bin/ssbj quickstart "$dir"
.venv/bin/ssbj validate "$dir/job.yaml"
.venv/bin/ssbj run --config "$dir/job.yaml"
.venv/bin/python - "$dir" <<'PY'
import sqlite3, sys
db = sqlite3.connect(f"{sys.argv[1]}/warehouse.db")
print("warehouse orders_enriched:", db.execute("SELECT COUNT(*) FROM orders_enriched").fetchone()[0], "rows")
for row in db.execute("SELECT order_id, customer_id, amount, c_name, c_segment FROM orders_enriched LIMIT 3"):
    print("  ", row)
print("dead letters:")
for row in db.execute("SELECT position, reason FROM orders_dead_letters LIMIT 3"):
    print("  ", row)
PY
