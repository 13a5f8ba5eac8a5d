"""sweeps/slurm-workers.sbatch submitted with sbatch to a real one-node SLURM (tests/slurm_cluster.py),
as the docs show it: tasks sharing one study finish every cell once, one-process trials train as
one process, a DDP trial is an srun step whose ranks Lightning's SLURMEnvironment joins, a dry
run prints each task's placement, and a requeued job finishes every cell once. Trials are a tiny
copy task on the CPU; what only several nodes can show (a trial's srun step spanning them) is
checked on its dry-run command."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from conftest import REPO, cli_in_process
from lit_attention.sweep import trial as tr

TEMPLATE = REPO / "sweeps" / "slurm-workers.sbatch"
LIT = Path(sys.executable).with_name("lit-attention")
TINY = {"data.n_train": 200, "data.n_val": 40, "data.n_test": 20, "data.max_tokens": 224,
        "model.d_model": 16, "model.ffn": 32, "model.enc_layers": 1, "model.dec_layers": 1,
        "model.dropout": 0.0, "model.val_bleu": False, "model.warmup": 1, "trainer.max_epochs": 1,
        "trainer.enable_progress_bar": False, "trainer.accelerator": "cpu"}

def test_the_template_is_valid_bash():
    out = subprocess.run(["bash", "-n", str(TEMPLATE)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


class Submit:
    """sbatch sweeps/slurm-workers.sbatch from ``directory`` (the submit directory, as from a
    checkout), a sweep of ``lrs`` x ``seeds`` cells, with the study at ``storage``."""

    def __init__(self, slurm, directory: Path, storage: str, lrs=(1e-3, 2e-3), seeds=2, **fixed):
        self.slurm, self.dir, self.storage = slurm, directory, storage
        self.sweep = directory / "s.yaml"
        self.sweep.write_text(yaml.safe_dump({
            "study_name": "slurm", "base": str(REPO / "configs" / "copy.yaml"), "seeds": seeds,
            "objective": {"metric": "val_loss", "direction": "minimize"}, "sampler": "grid",
            "pruner": "none", "fixed": {**TINY, **fixed}, "space": {"model.lr": {"choices": list(lrs)}}}))

    def __call__(self, *sbatch_args, **export) -> tuple[str, dict]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "LIT_ATTENTION_", "WANDB_", "CUDA_", "OMP_", "MKL_"))}
        env.update(SWEEP=str(self.sweep), LIT_ATTENTION_SWEEP_STORAGE=self.storage, LIT_ATTENTION_BIN=str(LIT),
                   WANDB_MODE="offline", WANDB_SILENT="true", **export)
        job = self.slurm.sbatch("--cpus-per-task=1", *sbatch_args, TEMPLATE, env=env, cwd=self.dir)
        return job, self.slurm.state(job)

    def output(self, job: str) -> str:
        return (self.dir / f"lit-attention-sweep-{job}.out").read_text()

    def finished(self, job: str) -> str:
        info = self.slurm.wait(job)
        out = self.output(job)
        assert info["JobState"] == "COMPLETED", f"{info['JobState']} {info['ExitCode']}\n{out[-4000:]}"
        return out

    def study(self) -> optuna.Study:
        return optuna.load_study(study_name="slurm", storage=self.storage)

    def runs(self) -> list[Path]:
        return sorted(p for p in (self.dir / "runs" / "slurm").iterdir() if (p / "summary.json").exists())


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def assert_every_cell_finished_once(submit: Submit, cells: int) -> list:
    trials = submit.study().get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(t.user_attrs["cell"] for t in done) == sorted({t.user_attrs["cell"] for t in done})
    assert len(done) == cells, [(t.number, t.state.name, t.user_attrs.get("error")) for t in trials]
    for t in done:
        s = summary(Path(t.user_attrs["run_dir"]))
        assert s["status"] == "finished" and s["world_size"] == 1, s
    return trials


@pytest.fixture
def sqlite_submit(slurm, tmp_path):
    return Submit(slurm, tmp_path, f"sqlite:///{tmp_path / 'study.db'}")


@pytest.mark.slow
def test_a_dry_run_prints_each_tasks_placement_in_the_jobs_output_file(sqlite_submit):
    # The output file is in the submit directory, which exists before the script's first line.
    job, info = sqlite_submit("--nodes=1", "--ntasks=2", DRY_RUN="1")
    out = sqlite_submit.finished(job)
    assert info["StdOut"] == str(sqlite_submit.dir / f"lit-attention-sweep-{job}.out")
    workers = sorted(line for line in out.splitlines() if re.match(r"\d: worker ", line))
    assert [w.split()[:3] for w in workers] == [["0:", "worker", "0:"], ["1:", "worker", "0:"]], out
    assert all("first trial: " in w and "srun" not in w and "--trainer.devices" not in w for w in workers)
    assert not (sqlite_submit.dir / "runs").exists() and not (sqlite_submit.dir / "study.db").exists()


@pytest.mark.slow
def test_two_tasks_on_one_sqlite_study_finish_every_cell_once_each_trial_one_process(sqlite_submit):
    job, _ = sqlite_submit("--nodes=1", "--ntasks=2")
    out = sqlite_submit.finished(job)
    assert_every_cell_finished_once(sqlite_submit, 4)
    # both tasks ran workers (each prints its progress line with its task's label)
    assert re.search(r"^0: \[slurm\] ", out, re.M) and re.search(r"^1: \[slurm\] ", out, re.M), out
    for run in sqlite_submit.runs():
        assert "srun" not in (run / "trial.log").read_text()   # nor Lightning's hint to start it with srun
    assert len(sqlite_submit.runs()) == 4


@pytest.mark.slow
def test_two_tasks_on_one_postgresql_study_finish_every_cell_once(slurm, postgres, tmp_path):
    submit = Submit(slurm, tmp_path, postgres(password="S3cretOfTheStudy"))
    job, _ = submit("--nodes=1", "--ntasks-per-node=2")
    out = submit.finished(job)
    assert "S3cretOfTheStudy" not in out and "postgres:***@" in out
    assert_every_cell_finished_once(submit, 4)


@pytest.mark.slow
def test_a_ddp_trial_is_an_srun_step_of_the_jobs_tasks_joined_by_lightning(slurm, tmp_path):
    submit = Submit(slurm, tmp_path, f"sqlite:///{tmp_path / 'study.db'}", lrs=(1e-3,), seeds=1)
    job, _ = submit("--nodes=1", "--ntasks-per-node=2", NODES_PER_TRIAL="1")
    steps = set()   # the job's srun steps while it runs: the worker is in the batch shell, the trial a step
    while slurm.state(job)["JobState"] in ("PENDING", "RUNNING", "CONFIGURING"):
        step = slurm.run("scontrol", "-o", "show", "step", f"{job}.0", check=False).stdout
        steps |= set(re.findall(r"StepId=(\S+) .*Tasks=(\d+)", step))
        time.sleep(0.5)
    out = submit.finished(job)
    assert steps == {(f"{job}.0", "2")}, out
    (trial,) = submit.study().get_trials()
    assert trial.state == TrialState.COMPLETE, (trial.user_attrs, out[-3000:])
    (run,) = submit.runs()
    s = summary(run)
    assert s["status"] == "finished" and s["world_size"] == 2, s
    log = (run / "trial.log").read_text()
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in log and "GLOBAL_RANK: 1, MEMBER: 2/2" in log, log[-3000:]
    assert "srun` command is available" not in log


@pytest.mark.slow
def test_a_job_requeued_mid_trial_finishes_every_cell_once(slurm, tmp_path):
    submit = Submit(slurm, tmp_path, f"sqlite:///{tmp_path / 'study.db'}", seeds=1, **{"trainer.max_epochs": 20})
    job, _ = submit("--nodes=1", "--ntasks=2")
    runs = tmp_path / "runs" / "slurm"
    end = time.monotonic() + 300
    while len(list(runs.glob("*/checkpoints/last.ckpt"))) < 2:   # both trials past a checkpoint
        assert time.monotonic() < end and slurm.state(job)["JobState"] in ("PENDING", "RUNNING"), submit.output(job)
        time.sleep(0.5)
    slurm.run("scontrol", "requeue", job)
    end = time.monotonic() + 400
    while (info := slurm.state(job))["JobState"] != "COMPLETED" or info["Restarts"] == "0":
        assert time.monotonic() < end and info["JobState"] != "FAILED", (info, submit.output(job))
        if info["JobState"] == "PENDING" and info["Reason"] == "BeginTime":   # SLURM's delay before a requeued job
            slurm.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        time.sleep(0.5)
    out = submit.output(job)
    assert "DUE TO JOB REQUEUE" in out and "continuing trial" in out, out   # both attempts' output, appended
    trials = assert_every_cell_finished_once(submit, 2)
    stopped = [t for t in trials if t.state == TrialState.FAIL]
    seen = [(t.number, t.state.name, t.user_attrs) for t in trials]
    assert len(stopped) == 2, seen
    for t in stopped:   # the killed attempt: interrupted at a checkpoint, continued by the new one
        assert t.user_attrs["error"] == "interrupted (SIGTERM); continue with --resume", t.user_attrs
        resumed = [d for d in trials if d.user_attrs.get("resumed_from") == t.number]
        assert len(resumed) == 1, seen
        (resumed,) = resumed
        assert resumed.state == TrialState.COMPLETE and resumed.user_attrs["run_dir"] == t.user_attrs["run_dir"]
    assert len(submit.runs()) == 2


@pytest.mark.parametrize("slurm_env,devices,nodes,step", [
    ({}, 2, 1, False),                                           # outside SLURM: Lightning starts the ranks
    ({"SLURM_JOB_ID": "7"}, 2, 1, True),                         # a job's batch shell: srun starts them
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, 2, 1, False),  # inside a task: Lightning starts them
    ({"SLURM_JOB_ID": "7"}, 1, 1, False),                        # one process: no step
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}, 2, 2, True),   # across nodes: always a step
])
def test_srun_starts_a_trials_ranks_only_where_no_task_holds_them(monkeypatch, slurm_env, devices, nodes, step):
    for key in ("SLURM_JOB_ID", "SLURM_STEP_ID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in slurm_env.items():
        monkeypatch.setenv(key, value)
    assert tr.launcher(nodes, devices)[:1] == (["srun"] if step else [])


# -- what one node cannot show: a trial's srun step across several nodes (dry run, a stand-in job) -

@pytest.mark.slow
def test_a_trial_across_nodes_is_an_srun_step_of_every_node(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({
        "study_name": "slurm", "base": str(REPO / "configs" / "copy.yaml"), "seeds": 1,
        "objective": {"metric": "val_loss", "direction": "minimize"}, "sampler": "grid",
        "space": {"model.lr": {"choices": [1e-3]}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LIT_ATTENTION_", "CUDA_"))}
    env.update(SLURM_JOB_ID="7", SLURM_NTASKS_PER_NODE="8", CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")
    done = cli_in_process("sweep", sweep, "--root", tmp_path / "runs", "--workers", 1, "--nodes-per-trial", 4,
                          "--devices-per-trial", 8, "--dry-run", env=env)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("worker ")]
    assert " first trial: srun --nodes=4 --ntasks-per-node=8 --kill-on-bad-exit=1 --ntasks=32 " in line
    assert line.endswith("--trainer.devices 8 --trainer.strategy ddp --trainer.num_nodes 4")
