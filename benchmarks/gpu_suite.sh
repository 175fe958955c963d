#!/usr/bin/env bash
# The client library's checks on a GPU machine, in one run (docs/results.md, "On a GPU"):
# the per-step overhead of AdaptiveDataParallel over DDP and of AdaptiveShardedDataParallel over
# FSDP2 on NCCL, and what a restart (stop + checkpoint + start + restore) costs a job of a few
# hundred million parameters. Each check has its own time limit, and a failing one does not stop
# the others; every table is also written as JSON under OUT_DIR.
#
#     bash benchmarks/gpu_suite.sh OUT_DIR        # PYTHON=... to pick the interpreter
#     STEPS="overhead_mlp gpu_types" bash benchmarks/gpu_suite.sh OUT_DIR    # some checks only
#
# Checks: overhead_mlp, overhead_mlp_long (the same MLP at a batch whose step takes ~100 ms, the
# length of a real training step), overhead_cnn, overhead_fsdp2, restart, gpu_types (the daemon
# and the worker name the GPU type alike: benchmarks/gpu_type_check.py).
set -u
out="${1:-gpu-results}"
mkdir -p "$out"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
steps=" ${STEPS:-overhead_mlp overhead_mlp_long overhead_cnn overhead_fsdp2 restart gpu_types} "
step() {  # step NAME LIMIT_S COMMAND...: run one check, log it, note its exit status
  local name="$1" limit="$2"
  shift 2
  [[ "$steps" == *" $name "* ]] || return 0
  echo "=== $name (limit ${limit} s)"
  local start=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"
  echo "=== $name: exit ${PIPESTATUS[0]} after $((SECONDS - start)) s"
}
nvidia-smi -L
"$py" -c "import sys, torch; print(sys.version.split()[0], torch.__version__,
      'nccl', torch.cuda.nccl.version(), torch.cuda.get_device_name())"
overhead=(benchmarks/client_overhead.py --device cuda --backend nccl --nproc 1 --repeats 5)
step overhead_mlp 90 "$py" "${overhead[@]}" --model mlp --width 4096 --depth 4 --batch 256 \
  --json "$out/overhead_mlp.json"
step overhead_mlp_long 150 "$py" "${overhead[@]}" --model mlp --width 4096 --depth 4 \
  --batch 16384 --repeats 3 --json "$out/overhead_mlp_long.json"
step overhead_cnn 90 "$py" "${overhead[@]}" --model cnn --width 512 --batch 128 \
  --json "$out/overhead_cnn.json"
step overhead_fsdp2 90 "$py" "${overhead[@]}" --sharded --model mlp --width 4096 --depth 4 \
  --batch 256 --json "$out/overhead_fsdp2.json"
step restart 200 "$py" benchmarks/gpu_restart.py --width 4096 --depth 4 --cycles 3 \
  --json "$out/restart.json"
step gpu_types 60 "$py" benchmarks/gpu_type_check.py --json "$out/gpu_types.json"
