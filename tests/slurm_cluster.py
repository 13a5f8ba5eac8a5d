"""A real one-node SLURM for the tests: munged, slurmctld and slurmd from Debian's `slurm-wlm` and
`munge`, started as root in the foreground, with their key, configuration, state, logs and sockets
in one temporary directory and ports of their own; every daemon is stopped by its pid at the end.

The clients (sbatch, srun, scontrol) find this cluster through SLURM_CONF in `Cluster.env`, which
a job submitted with --export=ALL passes on to its own srun calls.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

INSTALL = "apt-get install -y slurm-wlm munge"
DAEMONS = ("munged", "slurmctld", "slurmd")
CPUS = 4          # declared, not bound (task/none): room for 2 tasks and a step of 2 ranks at once
KILL_WAIT = 30    # SLURM's default: seconds between a job's SIGTERM and SIGKILL (trials write checkpoints)

CONFIG = """\
ClusterName=litattention
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket
StateSaveLocation={dir}/ctld
SlurmdSpoolDir={dir}/slurmd
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
PlugStackConfig={dir}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait={kill_wait}
MinJobAge=600
FirstJobId={first_job}
# the node is this host by its name: Lightning's SLURMEnvironment resolves SLURM_NODELIST for DDP
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def daemon(name: str) -> str | None:
    """The daemon's executable (in /usr/sbin, which a user's PATH may lack), or None."""
    found = shutil.which(name) or Path("/usr/sbin", name)
    return str(found) if Path(found).exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, directory: Path):
        self.dir = directory
        self.env = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf")}
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        d = self.dir
        for sub in ("ctld", "slurmd", "munge"):
            (d / sub).mkdir(mode=0o700)
        key = d / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        (d / "plugstack.conf").write_text("")
        ctld_port = _free_port()
        (d / "slurm.conf").write_text(CONFIG.format(
            host=socket.gethostname(), ctld_port=ctld_port, slurmd_port=_free_port(), dir=d,
            cpus=CPUS, kill_wait=KILL_WAIT,
            # Lightning's SLURMEnvironment takes port 15000 + the job id's last 4 digits for DDP:
            # clusters of other test processes start elsewhere
            first_job=ctld_port % 9000 * 100 + 1))
        self._spawn("munged", [daemon("munged"), "--foreground", "--force", f"--socket={d}/munge.socket",
                               f"--key-file={key}", f"--pid-file={d}/munge/munged.pid",
                               f"--log-file={d}/munge/munged.log", f"--seed-file={d}/munge/seed"])
        self._until(lambda: (d / "munge.socket").exists(), "munged")
        self._spawn("slurmctld", [daemon("slurmctld"), "-D", "-i", "-f", str(d / "slurm.conf")])
        self._spawn("slurmd", [daemon("slurmd"), "-D", "-f", str(d / "slurm.conf")])
        self._until(lambda: self.run("sinfo", "-h", "-o", "%t", check=False).stdout.strip() == "idle",
                    "an idle node")

    def _spawn(self, name: str, cmd: list[str]) -> None:
        with open(self.dir / f"{name}.out", "wb") as out:
            self.procs[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                                stdin=subprocess.DEVNULL, start_new_session=True)

    def _until(self, ready, what: str, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while not ready():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead or time.monotonic() > end:
                raise RuntimeError(f"SLURM test cluster: no {what} ({', '.join(dead) or 'timeout'})\n"
                                   + self.logs())
            time.sleep(0.2)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.dir.glob("*.log")) + sorted(self.dir.glob("*.out")) if p.is_file())

    def run(self, *cmd, check=True, **kw) -> subprocess.CompletedProcess:
        done = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, env=self.env, timeout=60, **kw)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, cmd))}: exit {done.returncode}\n{done.stdout}{done.stderr}")
        return done

    def sbatch(self, *args, env: dict | None = None, cwd: Path | None = None) -> str:
        """Submit; returns the job id."""
        done = subprocess.run(["sbatch", "--parsable", *map(str, args)], capture_output=True, text=True,
                              env={**self.env, **(env or {})}, cwd=cwd, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip().split(";")[0]

    def state(self, job: str) -> dict[str, str]:
        """`scontrol show job`'s fields (JobState, ExitCode, Restarts, StdOut, ...)."""
        out = self.run("scontrol", "-o", "show", "job", job).stdout
        return dict(re.findall(r"(\w+)=(\S*)", out))

    def wait(self, job: str, until=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"),
             timeout: float = 400) -> dict[str, str]:
        end = time.monotonic() + timeout
        while (info := self.state(job))["JobState"] not in until:
            if time.monotonic() > end:
                self.run("scancel", job, check=False)
                raise AssertionError(f"job {job} still {info['JobState']} after {timeout} s\n{self.logs()}")
            time.sleep(0.5)
        return info

    def stop(self) -> None:
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "-u", "root", check=False)
            end = time.monotonic() + 2 * KILL_WAIT
            while self.run("squeue", "-h", "-t", "R,CG", check=False).stdout.strip() and time.monotonic() < end:
                time.sleep(0.5)
        for name in reversed(DAEMONS):   # slurmd, slurmctld, then munged
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A one-node SLURM cluster of this test session (see the module's docstring)."""
    absent = [name for name in DAEMONS if daemon(name) is None]
    if absent:
        pytest.skip(f"no {', '.join(absent)} (.ci/run installs them; elsewhere: {INSTALL})")
    if os.geteuid() != 0:
        pytest.skip("the test SLURM cluster runs its daemons as root")
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
