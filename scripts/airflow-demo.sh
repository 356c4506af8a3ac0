#!/usr/bin/env bash
# Install ssbj with Spark, Airflow and Great Expectations, then run the shipped DAGs with
# `airflow dags test` on the demo data (throwaway MariaDB on 127.0.0.1, SQLite Airflow metadata,
# Spark local mode): set-up, enrichment, validation, publish; then a corrupted delivery quarantined.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/system-deps.sh
scripts/setup.sh dev
scripts/setup-airflow.sh .venv
exec .venv/bin/python scripts/airflow_demo.py "${1:-airflow-demo}"
