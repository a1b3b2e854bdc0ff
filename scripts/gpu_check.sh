#!/usr/bin/env bash
# The GPU check (docs/performance.md): the figures users quote first and every CUDA claim of resbench in one short
# run, on a machine with CUDA, torch, torchvision, timm, pandas, seaborn, scikit-learn, tqdm, filelock, pytest and
# tensorboard installed and no network. Installs resbench without dependencies, then runs scripts/gpu_check.py:
# numbered checks, each with its own time limit, a failed one never stopping the next; the summary (OUT/summary.md,
# OUT/summary.json), the logs and the rows survive. The whole invocation fits in 8 minutes on a cold machine
# (--quick: 4); --dry-run prints each limit and its source.
#   bash scripts/gpu_check.sh [OUT] [--quick] [--dry-run] [--timm-benchmark PATH] [--device cpu]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
dry=0
for arg in "$@"; do
  [ "$arg" = "--dry-run" ] && dry=1
done
if [ "$dry" = 0 ]; then
  "$PY" -m pip install --quiet --no-deps --no-build-isolation -e . >/dev/null
fi
exec "$PY" scripts/gpu_check.py "$@"
