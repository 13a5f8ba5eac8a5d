"""How fast a sweep over a misspelt key stops: CPU seconds of `lit-attention sweep` from start to its
exit 2, against importing Lightning in a fresh interpreter (the floor of any check that parses the
trial arguments with the training CLI's own parser), measured in turns in the same run.

Issue 19's goal: a sweep over a typo'd key exits 2 in under 5 seconds without running a trial. CPU
seconds, not wall: wall time on a shared 2-core machine says more about the neighbours. This is a
benchmark, not a test, because a loaded machine inflates even CPU seconds (shared caches, a
sibling hyperthread): tests/sweep/test_cli.py checks the exit, the message and that nothing was
written; this script measures the time.

    .venv/bin/python bench/typo_exit.py [--quick] [--rounds 5]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib as B

MESSAGE = "unknown option model.hiden_size — did you mean model.d_model?"
GOAL_CPU_SECONDS = 5.0


def typo_sweep(root: Path) -> Path:
    """A two-cell sweep file whose second key is misspelt (the sweep must refuse it)."""
    path = root / "typo.yaml"
    path.write_text(f"study_name: typo\nbase: {B.REPO / 'configs' / 'copy.yaml'}\nroot: {root / 'runs'}\n"
                    "objective: {metric: val_bleu, direction: maximize}\nsampler: grid\nseeds: 1\n"
                    "space:\n  model.family: {choices: [transformer, rnn]}\n"
                    "  model.hiden_size: {choices: [32, 64]}\n")
    return path


def child_cpu(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    """CPU seconds (user + system) that the command's processes used, and its result."""
    before = os.times()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return cpu, out


def main() -> None:
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5, help="measurements of each (default 5; 1 with --quick)")
    args = p.parse_args()
    B.setup(args)
    rounds = 1 if args.quick else args.rounds
    print(B.machine())
    baseline_cmd = [sys.executable, "-c", "import lightning.pytorch"]
    with tempfile.TemporaryDirectory() as tmp:
        sweep_cmd = [sys.executable, "-m", "lit_attention.cli", "sweep", str(typo_sweep(Path(tmp)))]
        imports, sweeps = [], []
        for _ in range(rounds):
            imports.append(child_cpu(baseline_cmd)[0])
            cpu, out = child_cpu(sweep_cmd)
            if out.returncode != 2 or MESSAGE not in out.stderr or (Path(tmp) / "runs").exists():
                sys.exit(f"the typo'd sweep did not stop as it should (exit {out.returncode}):\n{out.stderr}")
            sweeps.append(cpu)
    B.table(["", "median CPU s", "min", "max"],
            [["import lightning.pytorch (baseline)", B.median(imports), min(imports), max(imports)],
             ["typo'd sweep, to its exit 2", B.median(sweeps), min(sweeps), max(sweeps)]])
    typo, base = B.median(sweeps), B.median(imports)
    met = "met" if typo < GOAL_CPU_SECONDS else "NOT met"
    B.summary(f"typo_exit: typo'd sweep exits 2 after {typo:.2f} s CPU = {typo / base:.2f}x importing "
              f"Lightning ({base:.2f} s); goal < {GOAL_CPU_SECONDS:g} s CPU: {met}")


if __name__ == "__main__":
    main()
