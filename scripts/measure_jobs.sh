#!/usr/bin/env bash
# Issue #10's timing check of concurrent jobs: the same study swept with --jobs 1 (one run at a time, all the
# cores' threads) and then with --jobs 2 (two runs at once, the threads split between them), each alone on the
# machine, both measuring cost once per model configuration. Prints both wall times and their ratio. Usage
# (from the repository root; STUDY is a shipped study's name or a study file):
#   scripts/measure_jobs.sh [STUDY] [PRESET] [OUTDIR]      # default: scripts/timing_study.toml, full, /tmp/jobs
set -euo pipefail
STUDY=${1:-scripts/timing_study.toml}
PRESET=${2:-}
OUT=${3:-/tmp/jobs}
PY=${PYTHON:-python}
rm -rf "$OUT" && mkdir -p "$OUT"
if [[ $STUDY == *.toml ]]; then cmd=(sweep "$STUDY"); else cmd=(reproduce "$STUDY"); fi
if [[ -n $PRESET ]]; then cmd+=(--preset "$PRESET"); fi
declare -A secs
for jobs in 1 2; do
  t0=$SECONDS
  "$PY" -m bench "${cmd[@]}" --jobs "$jobs" --quiet --results-dir "$OUT/jobs$jobs" > "$OUT/jobs$jobs.log" 2>&1
  secs[$jobs]=$((SECONDS - t0))
  tail -1 "$OUT/jobs$jobs.log"
done
"$PY" -c "import sys; a, b = map(float, sys.argv[1:]); print(f'--jobs 1: {a:.0f} s   --jobs 2: {b:.0f} s   ratio {b / a:.2f}')" \
  "${secs[1]}" "${secs[2]}"
