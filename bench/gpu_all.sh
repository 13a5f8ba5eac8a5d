#!/usr/bin/env bash
# Every GPU measurement in one call of a GPU machine; logs go to OUT (default gpu-out/), the
# SUMMARY lines and exit statuses last:
#
#   bash bench/gpu_all.sh "$OUT" [PART ...]
#
# PART (default: gputests eager profile writes; each part runs under its own timeout below):
# gputests: the tests that need CUDA, with the rest of their files (graph_step's losses
#    equal the eager step's; a checkpoint saved on the GPU is copied off it as it was at the save;
#    a worker's batch, pinned, stays one Batch on its way to the GPU), and `sweep --gpus 0` /
#    `--gpus 99` dry runs and the accelerator check as this machine sees them;
# eager: bench/gpu_throughput.py's eager rows (plain loop vs `fit`, fp32 and bf16,
#    padded batches, CUDA graphs, graph_step);
# profile: gpu_throughput.py --part profile: fit's steps inside and between, host waits,
#    the main thread's share of them on a CPU, fp32's cProfile;
# writes: gpu_throughput.py --part writes: checkpoints by the writer thread vs in line;
# sweep (not by default): bench/gpu_sweep.py, packed trials on one GPU;
# compiled (not by default: torch.compile has crashed the process on some torch versions): the
#    plain loop compiled with CUDA graphs over padded batches;
# demo (not by default): the README's main job on this machine.
# Without a GPU each part says so and exits 0.
set -uo pipefail
out=${1:-gpu-out}
shift || true
parts=${*:-gputests eager profile writes}
mkdir -p "$out"
{ nvidia-smi || echo "no nvidia-smi"; } > "$out/nvidia-smi.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)" | tee "$out/versions.txt"
wants() { [[ " $parts " == *" $1 "* ]]; }

if wants gputests; then
  timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/lightning/test_graph_step.py \
    tests/lightning/test_checksum.py tests/data/test_batching.py 2>&1 | tail -20 | tee "$out/gpu_tests.log"
  echo "GPU tests exit ${PIPESTATUS[0]}" | tee -a "$out/exits.txt"
  # refusals decided from what this machine sees: a GPU it has plans (exit 0), one it lacks is
  # refused (exit 2), and cuda/gpu are usable accelerators (None: no reason against them)
  if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    python3 -m lit_attention.cli sweep sweeps/demo.yaml --gpus 0 --dry-run > "$out/gpus_seen.log" 2>&1
    echo "sweep --gpus 0 --dry-run exit $? (0 expected)" | tee -a "$out/exits.txt"
    python3 -m lit_attention.cli sweep sweeps/demo.yaml --gpus 99 --dry-run > "$out/gpus_unseen.log" 2>&1
    echo "sweep --gpus 99 --dry-run exit $? (2 expected)" | tee -a "$out/exits.txt"
    python3 -c "from lit_attention.lightning.cli import accelerator_unusable as u
print('accelerator refusals (None None expected):', u('cuda'), u('gpu'))" 2>&1 | tee -a "$out/exits.txt"
  else
    echo "no GPU: the --gpus and accelerator checks were not run" | tee -a "$out/exits.txt"
  fi
fi
if wants eager; then
  timeout 270 python3 bench/gpu_throughput.py --no-compile --time-limit 210 2>&1 | tee "$out/gpu_throughput.log"
  echo "gpu_throughput (eager) exit ${PIPESTATUS[0]}" | tee -a "$out/exits.txt"
fi
if wants profile; then
  timeout 150 python3 bench/gpu_throughput.py --part profile --out "$out" 2>&1 | tee "$out/gpu_profile.log"
  echo "gpu_throughput --part profile exit ${PIPESTATUS[0]}" | tee -a "$out/exits.txt"
fi
if wants sweep; then
  timeout 540 python3 bench/gpu_sweep.py 2>&1 | tee "$out/gpu_sweep.log"
  echo "gpu_sweep exit ${PIPESTATUS[0]}" | tee -a "$out/exits.txt"
fi
if wants compiled; then
  timeout 210 python3 bench/gpu_throughput.py --rows '^plain 32-true$|32-true compiled with CUDA graphs, padded' \
    --time-limit 60 2>&1 | tee "$out/gpu_throughput_compiled.log"
  echo "gpu_throughput (compiled) exit ${PIPESTATUS[0]}" | tee -a "$out/exits.txt"
fi
if wants writes; then
  timeout 150 python3 bench/gpu_throughput.py --part writes 2>&1 | tee "$out/gpu_writes.log"
  echo "gpu_throughput --part writes exit ${PIPESTATUS[0]}" | tee -a "$out/exits.txt"
fi
if wants demo && python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  start=$(date +%s)
  timeout 80 python3 -m lit_attention.cli sweep sweeps/demo.yaml --root "$out/demo-runs" 2>&1 | tail -40 \
    > "$out/demo.log"
  echo "demo sweep exit ${PIPESTATUS[0]} in $(( $(date +%s) - start )) s" | tee -a "$out/exits.txt"
  rm -rf "$out/demo-runs"
fi

echo
grep -h "^SUMMARY" "$out"/*.log
cat "$out/exits.txt"
