"""A fast stand-in for `lit-attention fit` in sweep race and fault tests (LIT_ATTENTION_FIT_COMMAND);
its space may only vary numeric model.* keys.

It trains nothing and imports no torch, but behaves like a run to everything that watches it: it
records its process in summary.json ("running"), appends one validation row to metrics.csv every
STANDIN_STEP_SECONDS for STANDIN_STEPS steps, then writes the final summary (val_loss = the seed).
Every start appends a line to starts.log, so a test sees a run directory that two processes used.
"""

import json
import os
import sys
import time
from pathlib import Path

from lit_attention.files import atomic_write
from lit_attention.tracking.liveness import process_identity

args = sys.argv[1:]
opt = {args[i][2:]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
run_dir = Path(opt["run.root"]) / opt["run.group"] / opt["run.id"]
run_dir.mkdir(parents=True, exist_ok=True)
model = {"family": "transformer", **{k[6:]: float(v) for k, v in opt.items() if k.startswith("model.")}}
seed = int(opt["seed_everything"])
with open(run_dir / "starts.log", "a") as f:
    f.write(f"{os.getpid()}\n")
summary = {"run_id": opt["run.id"], "group": opt["run.group"], "status": "running", "seed": seed, "model": model,
           "process": process_identity()}
atomic_write(run_dir / "summary.json", json.dumps(summary))
steps, pause = int(os.environ.get("STANDIN_STEPS", "3")), float(os.environ.get("STANDIN_STEP_SECONDS", "0.1"))
metrics = run_dir / "metrics.csv"
if not metrics.exists():
    metrics.write_text("step,epoch,val_loss\n")
for step in range(steps):
    time.sleep(pause)
    with open(metrics, "a") as f:
        f.write(f"{step},{step},{seed + 1.0 / (step + 1)}\n")
atomic_write(run_dir / "summary.json", json.dumps({**summary, "status": "finished", "val_loss": float(seed)}))
