#!/usr/bin/env bash
# Issue #10's timing check of "cost measured once per model configuration": the same study and preset swept twice
# side by side on this machine, once with the default (throughput, peak memory and FLOPs measured for the first
# seed of each model configuration and reused by the others) and once with --measure-every-run; each driver runs
# one run at a time with one torch thread, so the two share the cores evenly and see the same load. Prints both
# wall times and their ratio. Usage (from the repository root; STUDY is a shipped study's name or a study file,
# PRESET "" for its full grid):
#   scripts/measure_cost_once.sh [STUDY] [PRESET] [OUTDIR]      # default: degradation quick /tmp/cost-once
set -euo pipefail
STUDY=${1:-degradation}
PRESET=${2-quick}
OUT=${3:-/tmp/cost-once}
PY=${PYTHON:-python}
rm -rf "$OUT" && mkdir -p "$OUT"
if [[ $STUDY == *.toml ]]; then cmd=(sweep "$STUDY"); else cmd=(reproduce "$STUDY"); fi
if [[ -n $PRESET ]]; then cmd+=(--preset "$PRESET"); fi
sweep() {  # NAME [EXTRA...]: one timed sweep into $OUT/NAME, its wall seconds into $OUT/NAME.seconds
  local name=$1; shift
  local t0=$SECONDS
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$PY" -m bench "${cmd[@]}" --jobs 1 --quiet \
    --results-dir "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  echo $((SECONDS - t0)) > "$OUT/$name.seconds"
}
sweep once & a=$!
sweep every --measure-every-run & b=$!
wait "$a" "$b"
once=$(cat "$OUT/once.seconds"); every=$(cat "$OUT/every.seconds")
"$PY" - "$once" "$every" "$OUT" <<'PY'
import sys

import pandas as pd

once, every, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
for name in ("once", "every"):
    board = pd.read_csv(f"{out}/{name}/leaderboard.csv")
    own = (board["cost_source"] == board["run_id"]).sum()
    print(f"{name:>5}: {len(board)} rows ({(board['status'] == 'ok').sum()} ok), {own} measured their own cost")
print(f"cost once: {once:.0f} s   --measure-every-run: {every:.0f} s   ratio {once / every:.2f}")
PY
