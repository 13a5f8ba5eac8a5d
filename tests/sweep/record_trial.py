"""A stand-in for `lit-attention fit` in sweep tests (LIT_ATTENTION_FIT_COMMAND): it trains nothing,
records what the trial saw (placement variables, torch's thread count after the same call `fit`
makes) in its run directory, and finishes with val_loss = the trial's seed; run RECORD_TRIAL_OOM
fails with torch's message for a full GPU (exit 1)."""

import json
import os
import sys
import time
from pathlib import Path

from lit_attention.threads import use_allowed_cores

args = sys.argv[1:]
opt = {args[i][2:]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
run_dir = Path(opt["run.root"]) / opt["run.group"] / opt["run.id"]
run_dir.mkdir(parents=True, exist_ok=True)
threads = use_allowed_cores()
import torch  # noqa: E402

seen = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
seen.update(torch_threads=torch.get_num_threads(), threads=threads, argv=args)
(run_dir / "seen.json").write_text(json.dumps(seen))
if os.environ.get("RECORD_TRIAL_OOM") == opt["run.id"]:   # fail as fit does when the GPU is full
    print("Traceback (most recent call last):\n  ...", file=sys.stderr)
    sys.exit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
             "of 79.19 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB "
             "memory in use. Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.99 GiB is "
             "reserved by PyTorch but unallocated.")
time.sleep(float(os.environ.get("RECORD_TRIAL_SECONDS", "1")))  # so that both workers take trials
(run_dir / "summary.json").write_text(json.dumps({"status": "finished", "task": "copy",   # as a run records them
                                                  "val_loss": float(opt["seed_everything"])}))
