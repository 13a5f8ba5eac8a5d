"""Device placement and CPU threads of sweep workers: dry runs and refused
requests in this process; sweeps that run have their driver in this process, real worker and trial
subprocesses, and the trial command is a stand-in (record_trial.py) that records what it sees. GPUs are stand-in
CUDA_VISIBLE_DEVICES lists (and a stand-in nvidia-smi for their memory): nothing here needs one."""

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
from conftest import sweep_in_process as sweep_that_runs
from lit_attention.sweep import trial as tr
from lit_attention.sweep.placement import (PlacementError, default_trials_per_gpu, gpu_memory_gib, parse_gpus,
                                           place)
from lit_attention.sweep.progress import counted_trials

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


def sweep(path: Path, *args, **extra) -> subprocess.CompletedProcess:
    """A sweep that runs: the driver here (what it places is in its environment), workers and trials processes."""
    return sweep_that_runs(path, *args, env=env(**extra))


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
    with pytest.raises(PlacementError, match=r"need 6 GPUs, but 4 GPU\(s\) \(--gpus=0,1,2,3\) are available: "
                                             r"at most 2 worker\(s\) fit; lower --workers to 2 or raise "
                                             r"--trials-per-gpu to 2"):
        place(3, 2, parse_gpus("0,1,2,3"), "--gpus", per_gpu=1)
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
    assert out.stderr.startswith("note: this process sees no GPU (torch.cuda.device_count(): none): the plan is "
                                 "for a machine that has GPUs 0,1,2,3; a sweep run here with --gpus 0,1,2,3 is refused")
    lines = worker_lines(out.stdout)
    assert len(lines) == 2, out.stdout
    # first how the trials are placed and why, then every trial's command, in queue order
    assert out.stdout.splitlines()[0].startswith("placement: 2 trial(s) at once on 4 GPU(s) (--gpus=0,1,2,3), "
                                                 "at most 1 per set of 2 GPUs (default: 2 worker(s) over 2 GPU "
                                                 "set(s); ")
    trials = out.stdout.splitlines()[3:]
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


def test_more_trials_than_an_explicit_packing_holds_is_a_usage_error_that_says_what_fits(tmp_path):
    out = sweep_in_process(sweep_file(tmp_path), "--gpus", "0,1,2", "--workers", 2, "--devices-per-trial", 2,
                           "--trials-per-gpu", 1, "--dry-run")
    assert out.returncode == 2
    assert ("2 worker(s) x 2 device(s) per trial at 1 trial(s) per GPU need 4 GPUs, but 3 GPU(s) "
            "(--gpus=0,1,2) are available: at most 1 worker(s) fit; lower --workers to 1 or raise "
            "--trials-per-gpu to 2") in out.stderr
    assert not (tmp_path / "runs").exists()
    # the count and the list agree, whichever source the list came from
    out = sweep_in_process(sweep_file(tmp_path), "--workers", 2, "--trials-per-gpu", 1, "--dry-run",
                           CUDA_VISIBLE_DEVICES="3")
    assert out.returncode == 2
    assert "but 1 GPU(s) (CUDA_VISIBLE_DEVICES=3) are available: at most 1 worker(s) fit" in out.stderr
    out = sweep_in_process(sweep_file(tmp_path), "--gpus", "0", "--devices-per-trial", 2, "--dry-run")
    assert out.returncode == 2
    assert "a trial needs 2 GPUs, but 1 GPU(s) (--gpus=0) are available; lower --devices-per-trial to 1" in out.stderr


@pytest.mark.slow
def test_visible_devices_are_the_default_list(tmp_path):
    out = sweep_in_process(sweep_file(tmp_path), "--workers", 2, "--dry-run", CUDA_VISIBLE_DEVICES="5,7")
    assert out.returncode == 0, out.stderr
    assert [line.split()[2] for line in worker_lines(out.stdout)] == ["CUDA_VISIBLE_DEVICES=5",
                                                                      "CUDA_VISIBLE_DEVICES=7"]


@pytest.mark.parametrize("args, message", [
    (["--accelerator", "gpu"], "--accelerator gpu: no GPU to give the trials"),
    (["--accelerator", "tpu"], "--accelerator tpu: no tpu device here"),   # not every trial failing
    (["--nodes-per-trial", 2], "a trial spanning nodes is an srun step"),
    (["--trials-per-gpu", 2], "--trials-per-gpu 2: no GPU to put trials on (none visible)"),
    (["--trials-per-gpu", 2, "--gpus", "none"], "--trials-per-gpu 2: no GPU to put trials on (--gpus none)"),
    (["--trials-per-gpu", 0], "--trials-per-gpu must be >= 1"),
])
def test_requests_that_cannot_be_met_exit_2(tmp_path, args, message):
    out = sweep_in_process(sweep_file(tmp_path), *args, "--dry-run")
    assert out.returncode == 2 and message in out.stderr, out.stderr


@pytest.mark.parametrize("gpus, visible, message", [
    # each would give the trials CUDA_VISIBLE_DEVICES naming no GPU (or another job's), and `auto`
    # would then train them on the CPU without a word
    ("0,1", None, "--gpus 0,1: 0, 1 not among the GPUs this process sees (torch.cuda.device_count(): none)"),
    ("abc", "0", "--gpus abc: abc not among the GPUs this process sees (CUDA_VISIBLE_DEVICES: 0)"),
    ("0,1", "2,3", "--gpus 0,1: 0, 1 not among the GPUs this process sees (CUDA_VISIBLE_DEVICES: 2, 3)"),
    ("GPU-5c1e", None, "--gpus GPU-5c1e: GPU-5c1e not among the GPUs this process sees"),
])
def test_gpus_this_process_does_not_see_are_refused(tmp_path, gpus, visible, message):
    extra = {"CUDA_VISIBLE_DEVICES": visible} if visible else {}
    out = sweep_in_process(sweep_file(tmp_path), "--gpus", gpus, **extra)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()


def test_gpus_and_a_cpu_accelerator_are_refused_together(tmp_path):
    out = sweep_in_process(sweep_file(tmp_path), "--gpus", "0", "--accelerator", "cpu", "--dry-run",
                           CUDA_VISIBLE_DEVICES="0")
    assert out.returncode == 2 and "--gpus 0 and --accelerator cpu: trials on the CPU use no GPU" in out.stderr


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
    out = sweep(path, "--gpus", "0,1,2,3", "--workers", 2, "--devices-per-trial", 2, CUDA_VISIBLE_DEVICES="0,1,2,3")
    assert out.returncode == 0, out.stdout + out.stderr
    study = optuna.load_study(study_name="placed", storage=f"sqlite:///{tmp_path / 'runs/placed/study.db'}")
    trials = counted_trials(study)   # not a trial skipped because another worker took its cell
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
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})   # the driver's (this process's) affinity, inherited by its workers
    try:
        out = sweep(path, RECORD_TRIAL_SECONDS="0")   # one worker: no other to leave trials to
    finally:
        os.sched_setaffinity(0, allowed)
    assert out.returncode == 0, out.stdout + out.stderr
    (seen_file,) = (tmp_path / "runs" / "placed").glob("*/seen.json")
    seen = json.loads(seen_file.read_text())
    assert seen["OMP_NUM_THREADS"] == "1" and seen["torch_threads"] == 1


def gpus_of(parts) -> list:
    return [",".join(p.gpus) if p.gpus is not None else None for p in parts]


@pytest.mark.parametrize("workers, devices, gpus, per_gpu, expected, sharing", [
    (2, 1, None, None, [None, None], [1, 1]),                          # no GPU: left alone
    (2, 1, "0", None, ["0", "0"], [2, 2]),                             # 1 GPU: both trials on it
    (3, 1, "0,1", None, ["0", "1", "0"], [2, 1, 2]),                   # 2 GPUs: spread, then packed
    (4, 1, "0,1", 2, ["0", "1", "0", "1"], [2, 2, 2, 2]),
    (2, 1, "0,1,2,3,4,5,6,7", None, ["0", "1"], [1, 1]),               # 8 GPUs: one trial each
    (16, 1, "0,1,2,3,4,5,6,7", 2, [str(i % 8) for i in range(16)], [2] * 16),
    (8, 2, "0,1,2,3,4,5,6,7", 2, ["0,1", "2,3", "4,5", "6,7"] * 2, [2] * 8),   # DDP trials, 2 per set
])
def test_workers_spread_over_the_gpus_then_pack_onto_them(workers, devices, gpus, per_gpu, expected, sharing):
    parts = place(workers, devices, parse_gpus(gpus) if gpus else None, "--gpus", per_gpu)
    assert gpus_of(parts) == expected
    assert [p.sharing for p in parts] == sharing


def test_the_default_packing_runs_every_worker_and_says_what_the_machine_holds():
    # one GPU of 140 GiB, 16 cores: the demo's 2 workers on it; 16 would have a core each
    k, why = default_trials_per_gpu(1, 140.4, 16, 2)
    assert k == 2 and why == ("default: 2 worker(s) over 1 GPU(s); up to 16 fit (140 GiB / ~4 GiB a trial = 35, "
                              "16 core(s) / 1 GPU(s) = 16)")
    # 8 GPUs of 80 GiB, 16 cores: 2 workers on two GPUs; 2 trials per GPU give each a core
    assert default_trials_per_gpu(8, 80, 16, 2) == (1, "default: 2 worker(s) over 8 GPU(s); up to 2 fit "
                                                       "(80 GiB / ~4 GiB a trial = 20, 16 core(s) / 8 GPU(s) = 2)")
    # more workers than memory holds: they all run, and the reason warns
    k, why = default_trials_per_gpu(1, 8, 16, 4)
    assert k == 4 and "more than the 2 that fit (8 GiB / ~4 GiB a trial = 2, 16 core(s) / 1 GPU(s) = 16)" in why
    assert "lower --workers if trials run out of GPU memory or crowd the cores" in why
    # fewer cores than trials
    assert "more than the 1 that fit" in default_trials_per_gpu(2, 80, 2, 4)[1]
    # memory unknown (no nvidia-smi): the cores alone, said so
    assert default_trials_per_gpu(1, None, 2, 2) == (
        2, "default: 2 worker(s) over 1 GPU(s); up to 2 fit (2 core(s) / 1 GPU(s) = 2; GPU memory unknown)")
    # DDP trials of 2 GPUs on 8 GPUs: 4 sets; 8 workers = 2 per set; 32 cores / 8 GPUs = 4
    k, why = default_trials_per_gpu(8, 80, 32, 8, devices=2)
    assert k == 2 and why.startswith("default: 8 worker(s) over 4 GPU set(s); up to 4 fit")


def stand_in_nvidia_smi(tmp_path: Path, script: str) -> str:
    """A PATH whose nvidia-smi runs `script` (bash), ahead of the real PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/bash\n{script}\n")
    smi.chmod(0o755)
    return f"{bin_dir}:{os.environ['PATH']}"


def test_gpu_memory_is_asked_of_nvidia_smi_and_unknown_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", stand_in_nvidia_smi(
        tmp_path, '[ "$*" = "--query-gpu=memory.total --format=csv,noheader,nounits" ] && printf "143771\\n81559\\n"'))
    memory, source = gpu_memory_gib()
    assert memory == pytest.approx(81559 / 1024) and source == "nvidia-smi"   # the smallest GPU
    monkeypatch.setenv("PATH", stand_in_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed'; exit 9"))
    assert gpu_memory_gib() == (None, "GPU memory unknown: nvidia-smi said 'NVIDIA-SMI has failed'")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert gpu_memory_gib() == (None, "GPU memory unknown: no nvidia-smi on PATH")


@pytest.mark.slow
def test_the_demo_runs_on_one_gpu_with_both_workers_on_it():
    """`CUDA_VISIBLE_DEVICES=0 lit-attention sweep sweeps/demo.yaml --dry-run` (2 workers, 1 GPU)
    exits 0: a sweep's workers are trials in flight, packed onto the GPUs."""
    out = sweep_in_process(REPO / "sweeps" / "demo.yaml", "--dry-run", CUDA_VISIBLE_DEVICES="0")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("placement: 2 trial(s) at once on 1 GPU(s) (CUDA_VISIBLE_DEVICES=0), at most 2 per "
                               "GPU (default: 2 worker(s) over 1 GPU(s); "), lines[0]
    assert [line.split()[2:6] for line in worker_lines(out.stdout)] == [
        ["CUDA_VISIBLE_DEVICES=0", "(shared", "by", "2"]] * 2


@pytest.mark.slow
def test_dry_run_lines_for_8_gpus_with_their_memory(tmp_path):
    path = stand_in_nvidia_smi(tmp_path, "for i in 0 1 2 3 4 5 6 7; do echo 81559; done")
    out = sweep_in_process(sweep_file(tmp_path), "--workers", 4, "--dry-run", CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7",
                           PATH=path)
    assert out.returncode == 0, out.stderr
    cores = CORES
    head = out.stdout.splitlines()[0]
    assert head.startswith("placement: 4 trial(s) at once on 8 GPU(s) (CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7), "
                           "at most 1 per GPU (default: 4 worker(s) over 8 GPU(s); ")
    assert f"80 GiB / ~4 GiB a trial = 19, {cores} core(s) / 8 GPU(s) = {cores // 8})" in head
    assert [line.split()[2] for line in worker_lines(out.stdout)] == [f"CUDA_VISIBLE_DEVICES={i}" for i in range(4)]
    threads = max(1, cores // 4)
    assert all(f" threads={threads} ({cores} core(s) / 4 process(es))" in line for line in worker_lines(out.stdout))
    # an explicit packing is said as such, and DDP trials pack per set of GPUs
    out = sweep_in_process(sweep_file(tmp_path), "--workers", 8, "--devices-per-trial", 2, "--trials-per-gpu", 2,
                           "--dry-run", CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7", PATH=path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == ("placement: 8 trial(s) at once on 8 GPU(s) (CUDA_VISIBLE_DEVICES=0,1,2,3,"
                                          "4,5,6,7), at most 2 per set of 2 GPUs (--trials-per-gpu)")
    assert [line.split()[2] for line in worker_lines(out.stdout)] == [
        f"CUDA_VISIBLE_DEVICES={g}" for g in ("0,1", "2,3", "4,5", "6,7") * 2]


def test_a_trial_out_of_gpu_memory_says_so_and_how_to_pack_fewer(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    torch_says = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total ..."
    assert tr.out_of_gpu_memory(f"exit code 1: {torch_says}", 4) == (
        f"out of GPU memory: 4 trials shared GPU 3; pack fewer (--trials-per-gpu 3, or fewer --workers) and run the "
        f"cell again with --resume | exit code 1: {torch_says}")
    assert tr.out_of_gpu_memory("OutOfMemoryError: CUDA out of memory. Tried", 1).startswith(
        "out of GPU memory: the trial ran alone on GPU 3: it needs a smaller batch (data.max_tokens) or model")
    assert tr.out_of_gpu_memory("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED", 2).startswith(
        "out of GPU memory: 2 trials shared GPU 3")
    other = "ValueError: something else | DefaultCPUAllocator: can't allocate memory"
    assert tr.out_of_gpu_memory(other, 2) == other   # not a GPU's memory: the error as it was


@pytest.mark.slow
def test_packed_workers_share_gpus_and_a_trial_out_of_memory_fails_with_the_reason_while_the_sweep_goes_on(tmp_path):
    """4 workers on 2 stand-in GPUs (the default packing: 2 per GPU); the trial of the first cell
    fails as fit does when its GPU is full, the other cells finish."""
    path = sweep_file(tmp_path, lrs=(1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 6e-3))
    out = sweep(path, "--workers", 4, CUDA_VISIBLE_DEVICES="0,1", RECORD_TRIAL_OOM="t0000-s0",
                RECORD_TRIAL_SECONDS="2")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "placement: 4 trial(s) at once on 2 GPU(s) (CUDA_VISIBLE_DEVICES=0,1), at most 2 per GPU" in out.stdout
    study = optuna.load_study(study_name="placed", storage=f"sqlite:///{tmp_path / 'runs/placed/study.db'}")
    # Not the trials that ran nothing: a worker that asked when another had just taken the last
    # waiting cell records its trial as skipped (failed, with no run; CI saw one).
    trials = counted_trials(study)
    failed = [t for t in trials if t.state == TrialState.FAIL]
    assert len(failed) == 1 and sum(t.state == TrialState.COMPLETE for t in trials) == 5
    (oom,) = failed
    gpu = json.loads((Path(oom.user_attrs["run_dir"]) / "seen.json").read_text())["CUDA_VISIBLE_DEVICES"]
    why = oom.user_attrs["error"]
    assert why.startswith(f"out of GPU memory: 2 trials shared GPU {gpu}; pack fewer (--trials-per-gpu 1, or "
                          f"fewer --workers) and run the cell again with --resume | exit code 1: "), why
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB." in why
    assert "lr=0.001 seed=0: failed (1 attempt(s)): out of GPU memory: 2 trials shared GPU" in out.stderr
    summary = json.loads((Path(oom.user_attrs["run_dir"]) / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == why   # the run store says it too
    by_worker: dict[str, set] = {}
    threads = max(1, CORES // 4)
    for t in trials:
        seen = json.loads((Path(t.user_attrs["run_dir"]) / "seen.json").read_text())
        by_worker.setdefault(t.user_attrs["worker"], set()).add(seen["CUDA_VISIBLE_DEVICES"])
        assert seen["OMP_NUM_THREADS"] == str(threads) and seen["torch_threads"] == threads
    assert all(len(gpus) == 1 for gpus in by_worker.values()), by_worker     # a worker keeps its GPU
    per_gpu = [g for gpus in by_worker.values() for g in gpus]
    assert per_gpu.count("0") <= 2 and per_gpu.count("1") <= 2 and set(per_gpu) <= {"0", "1"}
