#!/bin/bash
# Side-by-side round timings of two source trees (e.g. a worktree of an older main and this
# one), alternating the trees in separate processes so that both see the same machine load.
#
#   benchmarks/perf/perf_alternate.sh OTHER_TREE OUT_DIR N          # perf.py --quick e2e,parallel
#   benchmarks/perf/perf_alternate.sh OTHER_TREE OUT_DIR N --steady [NAMES [OPTIONS]] # steady_rounds.py
#   benchmarks/perf/perf_alternate.sh OTHER_TREE OUT_DIR N --operators      # operator_speed.py
#
# PYTHONPATH selects each tree's package (an editable install would import this one for both).
# Writes OUT_DIR/{other,this}.<i>.{log,md} (or steady.txt: lines `tree name seconds`, with
# --steady one per strategy, NAMES a comma-separated list, with --operators one per operator
# path, both scripts taken from this tree; OPTIONS are steady_rounds.py's, e.g. --dataset);
# compare the minimum over the N repetitions with benchmarks/perf/perf_compare.py OUT_DIR
# (see benchmarks/results/perf_before_after.md).
# Run with OMP_NUM_THREADS=1.
set -euo pipefail
other=$(cd "$1" && pwd); out=$2; n=$3; mode=${4:-}
names=${5:-fedavg,local,pfedgraph,ditto,fedaghn,panacea}
steady_options=("${@:6}")
this=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
strategies=cfl,ditto,fedaghn,fedavg,fedavg-ft,fedcedar,fedprox,fedprox-ft,local,panacea,pfedgat,pfedgraph,pfedhn,sfl
for i in $(seq "$n"); do
  for tree in other this; do
    dir=$other; [ $tree = this ] && dir=$this
    if [ "$mode" = "--steady" ]; then
      (cd "$dir" && PYTHONPATH="$dir" python "$this/benchmarks/perf/steady_rounds.py" "$names" "${steady_options[@]}") \
        2>/dev/null | sed "s/^/$tree /" >> "$out/steady.txt"
    elif [ "$mode" = "--operators" ]; then
      (cd "$dir" && PYTHONPATH="$dir" python "$this/benchmarks/perf/operator_speed.py") \
        2>/dev/null | sed "s/^/$tree /" >> "$out/steady.txt"
    else
      (cd "$dir" && PYTHONPATH="$dir" python benchmarks/perf/perf.py --quick --only e2e,parallel --strategies $strategies \
        --out "$out/$tree.$i.md" > "$out/$tree.$i.log" 2>&1)
    fi
  done
done
