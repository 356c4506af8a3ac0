#!/bin/bash
# Alternate `probe_groups.py time` between two checkouts on captured disk_probe calls.
# Usage (from the repository root): bench/results/bound/probe_ab.sh BASE_CHECKOUT CAPTURE.pkl... > LOG
# (make BASE_CHECKOUT with `git worktree add /tmp/base REV`; captures with `probe_groups.py capture`)
# Each checkout gets its own numba cache, so neither runs the other's compiled kernel.
set -euo pipefail
base=$1; shift
new=$PWD
for f in "$@"; do
  for r in 1 2 3; do
    for v in base new; do
      dir=$new; [ "$v" = base ] && dir=$base
      echo "== $(basename "$f") round $r $v"
      (cd "$dir" && NUMBA_CACHE_DIR=/tmp/nbc-probe-ab-$v PYTHONPATH="$dir" "$new/.venv/bin/python" \
        "$new/bench/results/bound/probe_groups.py" time "$f")
    done
  done
done
