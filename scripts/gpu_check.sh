#!/usr/bin/env bash
# The GPU check of issues #3, #10 and #12, for a machine with CUDA (run from the repository root):
#   the gpu-marked tests, then short resnet56 runs on synthetic 32x32 in fp32 and in bf16 + channels-last,
#   their rows written to results/gpu/, then a 24-layer Pre-LN probe table on CUDA and a model diff, every
#   Transformer variant's forward/backward in bf16, then a sweep on the local executor with one run per GPU. Prints everything; about 3-5 minutes on one modern GPU.
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
# The Transformer family on CUDA in bf16 (issue #11): a forward and backward of every variant at depth 6, and
# nGPT's renormalisation after the step; mHC's Sinkhorn iterations and the hyper-connection streams included.
"$PY" - <<'FRONTIER'
import torch
import torch.nn.functional as F

import variants

for name in variants.list_variants(family="transformer"):
    if name == "gpt2_small":
        continue
    model = variants.create(name, depth=6).cuda()
    x = torch.randint(0, 256, (4, 64), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), x.flatten())
    loss.backward()
    after = getattr(model, "after_optimizer_step", None)
    if after is not None:
        with torch.no_grad():
            after()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads), name
    print(f"{name}: loss {loss.item():.3f} (cuda, bf16 autocast), {len(grads)} parameter gradients finite")
FRONTIER
# Local executor, one run per GPU (issue #10): a sweep of 2 runs per visible GPU with --jobs = the GPU count;
# each run is pinned to its own GPU through CUDA_VISIBLE_DEVICES, and its row's device names it (cuda:<id>).
NGPU=$("$PY" -c "from bench.sweeps.executors import visible_gpus; print(len(visible_gpus()))")
cat > "$OUT/gpu-sweep.toml" <<STUDY
name = "gpu_sweep"
[base]
task = "synthetic"
image_size = 32
train_size = 4096
steps = 100
batch_size = 128
device = "cuda"
[grid]
variant = ["resnet"]
depth = [20]
seed = [$(seq -s, 0 $((2 * NGPU - 1)))]
STUDY
"$PY" -m bench sweep "$OUT/gpu-sweep.toml" --jobs "$NGPU" --gpus-per-run 1 --results-dir "$OUT/sweep"
"$PY" - "$OUT/sweep" <<'CHECK'
import sys

from bench.sweeps.executors import visible_gpus
from bench.runs.results import ResultsStore

df = ResultsStore(sys.argv[1]).load_leaderboard()
print(df[["run_id", "status", "device", "device_name", "cost_source", "train_samples_per_s"]].to_string(index=False))
assert (df["status"] == "ok").all(), "a run of the GPU sweep failed"
want = {f"cuda:{g}" for g in visible_gpus()}
assert set(df["device"]) == want, f"expected the runs spread one per GPU over {sorted(want)}, got {sorted(set(df['device']))}"
print(f"local executor: {len(df)} runs over {len(want)} GPU(s), one run per GPU at a time")
CHECK
# Issue 12 on CUDA: a run keeps its checkpoint, lesion and landscape rebuild it on the GPU (gradcorr runs on the CPU);
# the figures (rebuilt model's intact error = the run's recorded final validation error) printed for a reader.
"$PY" -m bench run --variant resnet --depth 20 --task digits --device cuda --steps 200 --save-checkpoint \
  --measure --quiet --results-dir "$OUT/analysis"
RUN=$("$PY" -c "import sys; from bench.runs.results import ResultsStore; print(ResultsStore(sys.argv[1]).load_leaderboard()['run_id'].iloc[-1])" "$OUT/analysis")
"$PY" -m bench lesion "$RUN" --device cuda --drop 2 4 --draws 3 --results-dir "$OUT/analysis"
"$PY" -m bench landscape "$RUN" --device cuda --dims 2 --points 7 --results-dir "$OUT/analysis"
"$PY" -m bench gradcorr --variant plain resnet --depth 20 56 --results-dir "$OUT/analysis"
"$PY" -m bench show "$RUN" --results-dir "$OUT/analysis" | grep final_val_acc
