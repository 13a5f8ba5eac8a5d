"""sweeps/slurm-workers.sbatch: valid bash, and run as SLURM would (a stand-in srun that starts
each task with its own CUDA_VISIBLE_DEVICES) it starts one worker per task with that task's GPUs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

TEMPLATE = REPO / "sweeps" / "slurm-workers.sbatch"
LIT = Path(sys.executable).with_name("lit-attention")
FAKE_SRUN = """#!/bin/bash
# stand-in srun: runs the command once per task, one after the other; task i sees the i-th
# ;-separated GPU list of FAKE_TASK_GPUS, as srun --gpus-per-task sets it
while [[ "$1" == --* ]]; do shift; done
IFS=';' read -ra tasks <<< "$FAKE_TASK_GPUS"
for i in "${!tasks[@]}"; do
  SLURM_PROCID=$i SLURM_LOCALID=$i CUDA_VISIBLE_DEVICES=${tasks[$i]} "$@" || exit $?
done
"""


def test_the_template_is_valid_bash():
    out = subprocess.run(["bash", "-n", str(TEMPLATE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.fixture
def slurm(tmp_path):
    if not LIT.exists():
        pytest.skip(f"{LIT} not installed (pip install -e .)")
    (tmp_path / "bin").mkdir()
    srun = tmp_path / "bin" / "srun"
    srun.write_text(FAKE_SRUN)
    srun.chmod(0o755)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({
        "study_name": "slurm", "base": str(REPO / "configs" / "copy.yaml"), "seeds": 1,
        "objective": {"metric": "val_loss", "direction": "minimize"}, "sampler": "grid",
        "space": {"model.lr": {"choices": [1e-3, 2e-3]}}}))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "LIT_ATTENTION_", "CUDA_", "OMP_", "MKL_"))}
    env.update(PATH=f"{tmp_path / 'bin'}:{env['PATH']}", SWEEP=str(sweep), DRY_RUN="1",
               LIT_ATTENTION_SWEEP_STORAGE=f"sqlite:///{tmp_path / 'study.db'}", LIT_ATTENTION_BIN=str(LIT),
               SLURM_SUBMIT_DIR=str(tmp_path), SLURM_JOB_ID="7", RUNS_ROOT=str(tmp_path / "runs"))

    def run(**extra) -> list[str]:
        out = subprocess.run(["bash", str(TEMPLATE)], capture_output=True, text=True, timeout=300,
                             env={**env, **extra}, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert not (tmp_path / "runs").exists() and not (tmp_path / "study.db").exists()
        return [line for line in out.stdout.splitlines() if line.startswith("worker ")]   # not the trial list

    return run


@pytest.mark.slow
def test_one_worker_per_task_with_that_tasks_gpus(slurm):
    lines = slurm(FAKE_TASK_GPUS="0,1;2,3")   # 2 tasks of 2 GPUs each
    assert [line.split()[:3] for line in lines] == [["worker", "0:", "CUDA_VISIBLE_DEVICES=0,1"],
                                                    ["worker", "0:", "CUDA_VISIBLE_DEVICES=2,3"]]
    assert all("--trainer.devices 2 --trainer.strategy ddp" in line for line in lines)


@pytest.mark.slow
def test_trials_per_gpu_packs_that_many_workers_on_each_tasks_gpu(slurm):
    lines = slurm(FAKE_TASK_GPUS="0;1", TRIALS_PER_GPU="2")   # 2 tasks of 1 GPU, 2 trials on each
    assert [line.split()[:3] for line in lines] == [["worker", "0:", "CUDA_VISIBLE_DEVICES=0"],
                                                    ["worker", "1:", "CUDA_VISIBLE_DEVICES=0"],
                                                    ["worker", "0:", "CUDA_VISIBLE_DEVICES=1"],
                                                    ["worker", "1:", "CUDA_VISIBLE_DEVICES=1"]]
    assert not any("--trainer.devices" in line for line in lines)


@pytest.mark.slow
def test_a_trial_across_nodes_is_an_srun_step_of_every_node(slurm):
    (line,) = slurm(NODES_PER_TRIAL="4", SLURM_NTASKS_PER_NODE="8", CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    assert line.startswith("worker 0: CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 ")
    assert " first trial: srun --nodes=4 --ntasks-per-node=8 --kill-on-bad-exit=1 " in line
    assert line.endswith("--trainer.devices 8 --trainer.strategy ddp --trainer.num_nodes 4")
