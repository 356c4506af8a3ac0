#!/bin/bash
# A/B: base (wt-base) vs new (main working tree), alternated, stepcost_ab ab at 10% and 1%
out=/work/notes/ab_pack.jsonl
for round in 1 2 3; do
  for frac in 0.1 0.01; do
    for side in base new; do
      if [ $side = base ]; then d=/work/wt-base; nc=/tmp/numba-base; else d=/work/main; nc=/tmp/numba-main; fi
      r=$(cd $d && NUMBA_CACHE_DIR=$nc PYTHONPATH=$d /work/main/.venv/bin/python bench/results/bound/stepcost_ab.py ab $frac 1 2>/dev/null | tr -d '\n')
      echo "{\"round\": $round, \"side\": \"$side\", \"frac\": $frac, \"r\": $r}" >> $out
    done
  done
done
