#!/usr/bin/env bash
# Add Airflow 3 (+ Spark, common-sql and, where it builds, MySQL providers) and Great Expectations 1.x
# to an existing venv that already holds ssbj[dev] (pyspark 4.3.0), without breaking pyspark.
#
# Usage: scripts/setup-airflow.sh [VENV]        (default: .venv of this repository)
#   SSBJ_AIRFLOW_MYSQL=auto|1|0  MySQL provider: auto (default) installs it only when mysqlclient can be
#                                built here (pkg-config finds libmariadb/mysqlclient headers).
#
# The trap this avoids: apache-airflow-providers-apache-spark (6.x) requires `pyspark-client`, a
# distribution that ships the same `pyspark/` package (newest 4.2.0). pip installs it over pyspark 4.3.0
# without a word: pyspark.__version__ becomes 4.2.0 while the jars stay 4.3.0, `pip check` stays clean,
# and uninstalling pyspark-client later deletes pyspark's Python files. So the provider goes in with
# --no-deps, its real dependencies are listed here, and `pyspark[connect]` supplies the Spark Connect
# client (grpcio, grpcio-status, googleapis-common-protos, zstandard) that pyspark-client stood for.
# `pip check` then reports exactly one known, harmless line about pyspark-client; anything else fails.
# great-expectations is installed without its [spark] extra (that pins pyspark < 4.2).
# Idempotent: re-running re-checks everything and repairs a venv where pyspark-client got in.
set -euo pipefail
cd "$(dirname "$0")/.."

venv="${1:-.venv}"
py="$venv/bin/python"
if [ ! -x "$py" ]; then
  echo "setup-airflow: no venv at $venv (create it first: scripts/setup.sh dev)" >&2
  exit 2
fi
pip=("$py" -m pip --disable-pip-version-check)

# Versions verified together (Python 3.11, 2026-11): see tests/e2e/test_dependency_compat.py.
PYSPARK="4.3.0"
SPARK_PROVIDER="apache-airflow-providers-apache-spark==6.3.4"
pins=(
  "apache-airflow==3.3.2"
  "apache-airflow-providers-common-compat==1.23.0"
  "apache-airflow-providers-common-sql==2.4.0"
  "great-expectations==1.24.1"
  "pyspark[connect]==$PYSPARK"
  # the Spark provider's other requirements (it is installed with --no-deps below)
  "grpcio-status>=1.76.0"
  "requests>=2.32.0"
  "tenacity>=8.3.0"
  # the project's own ranges, so nothing above moves them
  "pandas>=2.2,<3"
  "sqlalchemy>=2.0,<2.2"
)

mysql="${SSBJ_AIRFLOW_MYSQL:-auto}"
if [ "$mysql" = auto ]; then
  if command -v pkg-config >/dev/null 2>&1 && command -v cc >/dev/null 2>&1 \
    && { pkg-config --exists mysqlclient || pkg-config --exists libmariadb || pkg-config --exists mariadb; }; then
    mysql=1
  else
    mysql=0
    echo "setup-airflow: skipping apache-airflow-providers-mysql (mysqlclient needs a C compiler, pkg-config" \
      "and libmariadb-dev or libmysqlclient-dev; set SSBJ_AIRFLOW_MYSQL=1 to force)" >&2
  fi
fi
if [ "$mysql" = 1 ]; then
  pins+=("apache-airflow-providers-mysql==6.7.1")
fi

# A previous plain `pip install apache-airflow-providers-apache-spark` leaves pyspark-client over
# pyspark's files: remove it, then restore pyspark's own files.
repair=0
if "${pip[@]}" show pyspark-client >/dev/null 2>&1; then
  echo "setup-airflow: removing pyspark-client (it overwrites pyspark's Python files)" >&2
  "${pip[@]}" uninstall --yes --quiet pyspark-client
  repair=1
fi
if "${pip[@]}" show pyspark >/dev/null 2>&1 && ! "$py" - >/dev/null 2>&1 <<'EOF'
import importlib.metadata as md
import pyspark
raise SystemExit(pyspark.__version__ != md.version("pyspark"))
EOF
then
  echo "setup-airflow: pyspark's Python files are damaged or foreign; reinstalling pyspark" >&2
  repair=1
fi

"${pip[@]}" install --quiet "${pins[@]}"
"${pip[@]}" install --quiet --no-deps "$SPARK_PROVIDER"
if [ "$repair" = 1 ]; then
  "${pip[@]}" install --quiet --no-deps --force-reinstall "pyspark==$PYSPARK"
fi

# ---- verification: fail loudly ----
# A private directory: Python puts the script's directory first on sys.path, so a stray
# /tmp/grp.py (or any stdlib name) would shadow the standard library (a CI run failed so).
check_dir="$(mktemp -d)"
check_out="$check_dir/out.txt"
check_py="$check_dir/setup_airflow_check.py"
trap 'rm -rf "$check_dir"' EXIT
# Run from a file, not `python -c`: with -c, pyspark.sql.connect mistakes the process for a doctest run
# and calls sys.exit(0) silently when a Spark Connect dependency is missing.
cat >"$check_py" <<'EOF'
import glob
import importlib.metadata as md
import os
import re

import pyspark

jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "spark-core_*.jar"))
jar_versions = {re.sub(r"^spark-core_[0-9.]+-(.+)\.jar$", r"\1", os.path.basename(j)) for j in jars}
print("pyspark python:", pyspark.__version__, "jars:", ",".join(sorted(jar_versions)) or "none")
if jar_versions != {pyspark.__version__}:
    raise SystemExit(f"pyspark Python files ({pyspark.__version__}) and jars ({jar_versions}) disagree")
try:
    raise SystemExit(f"pyspark-client {md.version('pyspark-client')} is installed: it overwrites pyspark")
except md.PackageNotFoundError:
    pass

import great_expectations as gx
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: F401
from airflow.providers.common.sql.operators.sql import SQLExecuteQueryOperator  # noqa: F401

print("great_expectations:", gx.__version__)
print("apache-airflow:", md.version("apache-airflow"))
print("SETUP_AIRFLOW_OK")
EOF
if ! "$py" "$check_py" >"$check_out" 2>&1 || ! grep -q SETUP_AIRFLOW_OK "$check_out"; then
  cat "$check_out" >&2
  echo "setup-airflow: FAILED verification" >&2
  exit 1
fi
grep -v SETUP_AIRFLOW_OK "$check_out"

# pip check: the only accepted complaint is the pyspark-client requirement we leave out on purpose.
pip_check="$("${pip[@]}" check 2>&1 || true)"
unexpected="$(printf '%s\n' "$pip_check" \
  | grep -v -e '^No broken requirements found\.$' \
    -e '^apache-airflow-providers-apache-spark [0-9.]* requires pyspark-client, which is not installed\.$' \
  | grep -v '^$' || true)"
if [ -n "$unexpected" ]; then
  printf '%s\n' "$pip_check" >&2
  echo "setup-airflow: FAILED: pip check reports more than the known pyspark-client line" >&2
  exit 1
fi
echo "setup-airflow: OK ($venv)"
