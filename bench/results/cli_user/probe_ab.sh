#!/bin/bash
# interleave base and main: int64 at 10% (6.4MB) on 6M tuples, and 1% (640kB)
for mem in 6.4MB 640kB; do
for v in main wt-base; do
  (cd /work/$v && PYTHONPATH=/work/$v /work/main/.venv/bin/python /work/main/bench/results/cli_user/cli_user.py /work/scratch/cli-data int64 $mem 1 6000000 | sed "s/^{/{\"code\": \"$v\", \"mem\": \"$mem\", /") >> /work/scratch/cli_ab.jsonl
done; done
