#!/bin/bash
# base (a checkout of 5144f8f in /work/wt-base) against new (/work/main), alternated, three rounds,
# each run bench/results/bound/stepcost_ab.py MODE at each fraction of R; one JSON line a run into OUT.
# This session ran `ab.sh ab "0.1 0.01" /work/notes/ab_pack.jsonl` and `ab.sh profile 0.1 /work/notes/prof_pack.jsonl`
# (the paths are this machine's).
mode=$1; fracs=$2; out=$3
for round in 1 2 3; do
  for frac in $fracs; do
    for side in base new; do
      if [ $side = base ]; then d=/work/wt-base; nc=/tmp/numba-base; else d=/work/main; nc=/tmp/numba-main; fi
      args=$([ "$mode" = ab ] && echo "ab $frac 1" || echo "$mode $frac")
      r=$(cd $d && NUMBA_CACHE_DIR=$nc PYTHONPATH=$d /work/main/.venv/bin/python bench/results/bound/stepcost_ab.py $args 2>/dev/null | tr -d '\n')
      echo "{\"round\": $round, \"side\": \"$side\", \"frac\": $frac, \"r\": $r}" >> "$out"
    done
  done
done
