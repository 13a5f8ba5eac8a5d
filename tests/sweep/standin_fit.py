"""A fast stand-in for `lit-attention fit` in sweep race and fault tests (LIT_ATTENTION_FIT_COMMAND);
its space may only vary numeric model.* keys.

It trains nothing and imports no torch, but behaves like a run to everything that watches it: it
records its process in summary.json ("running"), appends one validation row to metrics.csv every
STANDIN_STEP_SECONDS for STANDIN_STEPS steps (STANDIN_STEPS_t0000_s0: run t0000-s0's own number)
and saves checkpoints/last.ckpt (a zip, written in place as torch.save does) after each, then
writes the final summary (val_loss = the seed). STANDIN_WORSE_t0000_s0 adds that much to run
t0000-s0's validation values (a configuration for a pruner to stop). A STOP file (the driver's
request_stop) ends it after the step it sees it at, with the status the file names, as fit does.
With `--ckpt_path last` it continues from the
checkpoint's step as fit does: rows logged after it are dropped and logged again, never twice.
Every start appends a line to starts.log (`PID` or `PID resume`), so a test sees a run directory
that two processes used.
"""

import json
import os
import sys
import time
import zipfile
from pathlib import Path

from lit_attention.files import atomic_write
from lit_attention.tracking.liveness import process_identity

args = sys.argv[1:]
opt = {args[i][2:]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
run_dir = Path(opt["run.root"]) / opt["run.group"] / opt["run.id"]
run_dir.mkdir(parents=True, exist_ok=True)
last = run_dir / "checkpoints" / "last.ckpt"
model = {"family": "transformer", **{k[6:]: float(v) for k, v in opt.items() if k.startswith("model.")}}
seed = int(opt["seed_everything"])
resume = opt.get("ckpt_path") == "last"
if resume and not last.is_file():
    sys.exit(f"standin_fit: error: nothing to resume: {last} does not exist")
with open(run_dir / "starts.log", "a") as f:
    f.write(f"{os.getpid()}{' resume' if resume else ''}\n")
summary = {"run_id": opt["run.id"], "group": opt["run.group"], "status": "running", "seed": seed, "model": model,
           "process": process_identity()}
atomic_write(run_dir / "summary.json", json.dumps(summary))
steps = int(os.environ.get("STANDIN_STEPS_" + opt["run.id"].replace("-", "_"), os.environ.get("STANDIN_STEPS", "3")))
pause = float(os.environ.get("STANDIN_STEP_SECONDS", "0.1"))
worse = float(os.environ.get("STANDIN_WORSE_" + opt["run.id"].replace("-", "_"), "0"))
metrics = run_dir / "metrics.csv"
first = 0
if resume:
    with zipfile.ZipFile(last) as z:
        first = int(z.read("step")) + 1
    kept = [r for r in metrics.read_text().splitlines()[1:] if int(r.split(",")[0]) < first]
    atomic_write(metrics, "".join(f"{r}\n" for r in ["step,epoch,val_loss", *kept]))
elif not metrics.exists():
    metrics.write_text("step,epoch,val_loss\n")
last.parent.mkdir(exist_ok=True)
for step in range(first, steps):
    time.sleep(pause)
    with open(metrics, "a") as f:
        f.write(f"{step},{step},{seed + worse + 1.0 / (step + 1)}\n")
    with zipfile.ZipFile(last, "w") as z:
        z.writestr("step", str(step))
    if (run_dir / "STOP").exists():
        status = (run_dir / "STOP").read_text().strip()
        atomic_write(run_dir / "summary.json", json.dumps({**summary, "status": status, "epochs": step + 1}))
        sys.exit(0)
atomic_write(run_dir / "summary.json", json.dumps({**summary, "status": "finished", "val_loss": float(seed)}))
