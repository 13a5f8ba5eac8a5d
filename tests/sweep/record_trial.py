"""A stand-in for `lit-attention fit` in sweep tests (LIT_ATTENTION_FIT_COMMAND): it trains nothing,
records what the trial saw (placement variables, torch's thread count after the same call `fit`
makes) in its run directory, and finishes with val_loss = the trial's seed."""

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
time.sleep(float(os.environ.get("RECORD_TRIAL_SECONDS", "1")))  # so that both workers take trials
(run_dir / "summary.json").write_text(json.dumps({"status": "finished", "val_loss": float(opt["seed_everything"])}))
