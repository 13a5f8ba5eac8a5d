"""Device placement and CPU threads of sweep workers (issue 21): dry runs and refused requests in
this process; sweeps that run have a real driver, real worker and trial subprocesses, and the trial
command is a stand-in (record_trial.py) that records what it sees."""

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from conftest import REPO, cli_in_process
from lit_attention.sweep.placement import PlacementError, parse_gpus, place

COPY = REPO / "configs" / "copy.yaml"
RECORD = Path(__file__).with_name("record_trial.py")
CORES = len(os.sched_getaffinity(0))


def env(**extra) -> dict:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("LIT_ATTENTION_", "WANDB_", "SLURM_"))
         and k not in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    e.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONUNBUFFERED="1",
             LIT_ATTENTION_FIT_COMMAND=json.dumps([sys.executable, str(RECORD)]), **extra)
    return e


def sweep_file(tmp_path: Path, lrs=(1e-3, 2e-3, 3e-3, 4e-3), **top) -> Path:
    data = {"study_name": "placed", "base": str(COPY), "root": str(tmp_path / "runs"),
            "objective": {"metric": "val_loss", "direction": "minimize"}, "sampler": "grid",
            "pruner": "none", "seeds": 1, "fixed": {"trainer.max_epochs": 1},
            "space": {"model.lr": {"choices": list(lrs)}}, **top}
    path = tmp_path / "placed.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sweep(path: Path, *args, timeout=300, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lit_attention.cli", "sweep", str(path), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env(**extra), cwd=REPO)


def sweep_in_process(path: Path, *args, **extra) -> subprocess.CompletedProcess:
    """`sweep` in this process, in the same environment: for runs that stop before any trial
    (--dry-run, a placement refused)."""
    return cli_in_process("sweep", path, *args, env=env(**extra))


def test_workers_get_disjoint_slices_of_the_gpu_list():
    parts = place(3, 2, parse_gpus("0,1,2,3,4,5,6"), "--gpus")
    assert [p.gpus for p in parts] == [["0", "1"], ["2", "3"], ["4", "5"]]
    assert parts[1].env()["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert place(2, 1, None, "none")[0].gpus is None  # no GPU: CUDA_VISIBLE_DEVICES left alone
    assert place(1, 1, parse_gpus("none"), "--gpus")[0].env()["CUDA_VISIBLE_DEVICES"] == ""
    with pytest.raises(PlacementError, match="need 6 GPUs, but 4 are available.*at most 2 worker"):
        place(3, 2, parse_gpus("0,1,2,3"), "--gpus")
    with pytest.raises(PlacementError, match="listed twice"):
        parse_gpus("0,1,1")


def test_threads_are_the_allowed_cores_shared_by_the_concurrent_processes(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))  # a 16-core task
    assert [p.threads for p in place(2, 2, None, "none")] == [4, 4]
    assert place(3, 1, None, "none")[0].threads == 5          # floor(16 / 3)
    assert place(8, 4, None, "none")[0].threads == 1          # at least one
    monkeypatch.setenv("OMP_NUM_THREADS", "3")                # the user's own setting wins, said so
    assert place(2, 2, None, "none")[0].describe().endswith("threads=3 (OMP_NUM_THREADS of the environment)")


def worker_lines(stdout: str) -> list[str]:
    """The dry run's line per worker (the list of every trial's command follows them)."""
    return [line for line in stdout.splitlines() if line.startswith("worker ")]


@pytest.mark.slow
def test_dry_run_shows_the_partition_on_a_machine_without_gpus_and_writes_nothing(tmp_path):
    path = sweep_file(tmp_path)
    out = sweep_in_process(path, "--gpus", "0,1,2,3", "--workers", 2, "--devices-per-trial", 2, "--dry-run")
    assert out.returncode == 0, out.stderr
    lines = worker_lines(out.stdout)
    assert len(lines) == 2, out.stdout
    # then every trial's command, in queue order
    trials = out.stdout.splitlines()[2:]
    assert trials[0] == "trials: 4, in queue order:" and len(trials) == 5, out.stdout
    assert trials[4].startswith("trial 3: lr=0.004 seed=0: ") and "--run.id t0003-s0" in trials[4]
    threads = max(1, CORES // 4)
    assert lines[0].startswith(f"worker 0: CUDA_VISIBLE_DEVICES=0,1 threads={threads} ")
    assert lines[1].startswith(f"worker 1: CUDA_VISIBLE_DEVICES=2,3 threads={threads} ")
    assert "--run.id t0000-s0" in lines[0] and "--model.lr 0.001" in lines[0]
    assert "--run.id t0001-s0" in lines[1] and "--model.lr 0.002" in lines[1]
    assert "--trainer.devices 2 --trainer.strategy ddp" in lines[0]
    assert "--trainer.accelerator" not in lines[0]  # the config's accelerator (auto) applies
    assert not (tmp_path / "runs").exists()


def test_more_gpus_than_listed_is_a_usage_error_that_says_how_many_fit(tmp_path):
    out = sweep_in_process(sweep_file(tmp_path), "--gpus", "0,1,2", "--workers", 2, "--devices-per-trial", 2,
                           "--dry-run")
    assert out.returncode == 2
    assert "2 worker(s) x 2 device(s) per trial need 4 GPUs, but 3 are available" in out.stderr
    assert "at most 1 worker(s) of 2 GPU(s) fit" in out.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_visible_devices_are_the_default_list(tmp_path):
    out = sweep_in_process(sweep_file(tmp_path), "--workers", 2, "--dry-run", CUDA_VISIBLE_DEVICES="5,7")
    assert out.returncode == 0, out.stderr
    assert [line.split()[2] for line in worker_lines(out.stdout)] == ["CUDA_VISIBLE_DEVICES=5",
                                                                      "CUDA_VISIBLE_DEVICES=7"]


@pytest.mark.parametrize("args, message", [
    (["--accelerator", "gpu"], "--accelerator gpu: no GPU to give the trials"),
    (["--nodes-per-trial", 2], "a trial spanning nodes is an srun step"),
])
def test_requests_that_cannot_be_met_exit_2(tmp_path, args, message):
    out = sweep_in_process(sweep_file(tmp_path), *args, "--dry-run")
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_an_accelerator_given_twice_is_refused(tmp_path):
    path = sweep_file(tmp_path, fixed={"trainer.accelerator": "cpu"})
    out = sweep_in_process(path, "--accelerator", "auto", "--dry-run")
    assert out.returncode == 2 and "fixed.trainer.accelerator both set the accelerator" in out.stderr


@pytest.mark.slow
def test_an_explicit_accelerator_reaches_every_trial(tmp_path):
    out = sweep_in_process(sweep_file(tmp_path), "--accelerator", "cpu", "--dry-run")
    assert out.returncode == 0 and "--trainer.accelerator cpu" in out.stdout


@pytest.mark.slow
def test_a_trial_spanning_nodes_is_one_srun_step_with_num_nodes(tmp_path):
    out = sweep_in_process(sweep_file(tmp_path), "--gpus", "0,1,2,3,4,5,6,7", "--devices-per-trial", 8,
                           "--nodes-per-trial", 4, "--dry-run", SLURM_JOB_ID="42")
    assert out.returncode == 0, out.stderr
    (line,) = worker_lines(out.stdout)
    assert line.startswith("worker 0: CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 threads=")
    assert " first trial: srun --nodes=4 --ntasks-per-node=8 --kill-on-bad-exit=1 " in line
    assert line.endswith("--trainer.devices 8 --trainer.strategy ddp --trainer.num_nodes 4")


@pytest.mark.slow
def test_real_workers_give_their_trials_disjoint_gpus_and_their_share_of_threads(tmp_path):
    path = sweep_file(tmp_path, lrs=(1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3))
    out = sweep(path, "--gpus", "0,1,2,3", "--workers", 2, "--devices-per-trial", 2)
    assert out.returncode == 0, out.stdout + out.stderr
    study = optuna.load_study(study_name="placed", storage=f"sqlite:///{tmp_path / 'runs/placed/study.db'}")
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 6
    by_worker: dict[str, set] = {}
    threads = max(1, CORES // 4)
    for t in trials:
        seen = json.loads((Path(t.user_attrs["run_dir"]) / "seen.json").read_text())
        by_worker.setdefault(t.user_attrs["worker"], set()).add(seen["CUDA_VISIBLE_DEVICES"])
        assert seen["OMP_NUM_THREADS"] == seen["MKL_NUM_THREADS"] == str(threads)
        assert seen["torch_threads"] == seen["threads"] == threads
    assert len(by_worker) == 2, by_worker                          # both workers ran trials
    assert all(len(sets) == 1 for sets in by_worker.values())      # one set per worker
    gpu_sets = [set(next(iter(s)).split(",")) for s in by_worker.values()]
    assert sorted(map(sorted, gpu_sets)) == [["0", "1"], ["2", "3"]]  # disjoint, covering the list


@pytest.mark.slow
def test_a_trial_alone_uses_the_cores_it_is_allowed(tmp_path):
    """One worker on one core (as under taskset or a 1-CPU SLURM task): the trial runs one thread; OMP/MKL say so."""
    path = sweep_file(tmp_path, lrs=(1e-3,))
    one_core = {min(os.sched_getaffinity(0))}
    cmd = [sys.executable, "-m", "lit_attention.cli", "sweep", str(path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO,
                         env=env(RECORD_TRIAL_SECONDS="0"),   # one worker: no other to leave trials to
                         preexec_fn=lambda: os.sched_setaffinity(0, one_core))
    assert out.returncode == 0, out.stdout + out.stderr
    (seen_file,) = (tmp_path / "runs" / "placed").glob("*/seen.json")
    seen = json.loads(seen_file.read_text())
    assert seen["OMP_NUM_THREADS"] == "1" and seen["torch_threads"] == 1
