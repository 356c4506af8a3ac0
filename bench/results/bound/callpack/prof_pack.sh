#!/bin/bash
out=/work/notes/prof_pack.jsonl
for round in 1 2 3; do
  for side in base new; do
    if [ $side = base ]; then d=/work/wt-base; nc=/tmp/numba-base; else d=/work/main; nc=/tmp/numba-main; fi
    r=$(cd $d && NUMBA_CACHE_DIR=$nc PYTHONPATH=$d /work/main/.venv/bin/python bench/results/bound/stepcost_ab.py profile 0.1 2>/dev/null | tr -d '\n')
    echo "{\"round\": $round, \"side\": \"$side\", \"frac\": 0.1, \"r\": $r}" >> $out
  done
done
