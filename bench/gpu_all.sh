#!/usr/bin/env bash
# Every GPU check of issues 37 and 38 in one call of a lent GPU machine (../shared/gpu/README.md),
# sized to finish in under 13 minutes (of a session's 15); logs go to OUT (default gpu-out/), a short table last:
#
#   source .gpu/env.sh; bash bench/gpu_all.sh "$OUT"
#
# 1. bench/gpu_throughput.py, eager rows: plain loop vs `fit` (fp32/bf16, fit without loader
#    workers), the plain loop over padded batches (data.pad_to_lengths; bf16 also with cuDNN's
#    attention, which plans each of the 11 shapes once);
# 2. bench/gpu_fit_attribution.py: where fit's step time goes (FLOP counting, diagnostics, bar);
# 3. bench/gpu_throughput.py, the compiled row that could pay on a launch-bound step: padded
#    batches (few shapes) under torch.compile with CUDA graphs, beside the eager fp32 baseline;
# 4. the README's main job, `lit-attention sweep sweeps/demo.yaml`, on this one-GPU machine.
# (Packed sweep trials, bench/gpu_sweep.py, were measured on 2026-11-27: docs/BENCHMARKS.md.)
# Without a GPU each part says so and exits 0.
set -uo pipefail
out=${1:-gpu-out}
mkdir -p "$out"
{ nvidia-smi || echo "no nvidia-smi"; } > "$out/nvidia-smi.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)" | tee "$out/versions.txt"

timeout 200 python3 bench/gpu_throughput.py --no-compile --time-limit 150 2>&1 | tee "$out/gpu_throughput.log"
echo "gpu_throughput (eager) exit ${PIPESTATUS[0]}" | tee -a "$out/exits.txt"

timeout 150 python3 bench/gpu_fit_attribution.py 2>&1 | tee "$out/gpu_fit_attribution.log"
echo "gpu_fit_attribution exit ${PIPESTATUS[0]}" | tee -a "$out/exits.txt"

timeout 300 python3 bench/gpu_throughput.py --rows '^plain 32-true$|32-true compiled with CUDA graphs, padded' \
  --time-limit 60 2>&1 | tee "$out/gpu_throughput_compiled.log"
echo "gpu_throughput (compiled) exit ${PIPESTATUS[0]}" | tee -a "$out/exits.txt"

if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  start=$(date +%s)
  timeout 80 python3 -m lit_attention.cli sweep sweeps/demo.yaml --root "$out/demo-runs" 2>&1 | tail -40 \
    > "$out/demo.log"
  echo "demo sweep exit ${PIPESTATUS[0]} in $(( $(date +%s) - start )) s" | tee -a "$out/exits.txt"
  rm -rf "$out/demo-runs"
fi

echo
grep -h "^SUMMARY" "$out"/*.log
cat "$out/exits.txt"
