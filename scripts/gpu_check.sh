#!/usr/bin/env bash
# The GPU check of issue #3, for a machine with CUDA (run from the repository root):
#   the gpu-marked tests, then short resnet56 runs on synthetic 32x32 in fp32 and in bf16 + channels-last,
#   their rows written to results/gpu/, then a 24-layer Pre-LN probe table on CUDA and a model diff. Prints everything; about 3-5 minutes on one modern GPU.
set -euo pipefail
OUT=${1:-results/gpu}
PY=${PYTHON:-python}
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name())"
"$PY" -m pytest -q -m gpu tests/test_gpu.py tests/test_images.py -p no:cacheprovider
for args in "--precision fp32" "--precision bf16 --channels-last"; do
  # shellcheck disable=SC2086
  "$PY" -m bench run --variant resnet56 --task synthetic --image-size 32 --device cuda --steps 200 \
    --batch-size 128 --train-size 8192 --val-size 1024 $args --results-dir "$OUT"
done
"$PY" -m bench leaderboard --results-dir "$OUT"
# Probes on CUDA: weight_grad_norm rows for every attention and FFN sublayer of a 24-layer Pre-LN LM.
"$PY" -m bench probe --variant preln --depth 24 --task text --seq-len 64 --batch-size 16 --device cuda \
  --csv "$OUT/probe-preln-d24.csv"
"$PY" -m bench diff postln preln --depth 12
