"""bench/step_clock.py: the step clock that the fit benchmarks time `fit` with."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow   # two fits, 1.6-1.7 CPU-s each
@pytest.mark.parametrize("wall", [False, True])
def test_validation_spans_are_on_the_clock_of_the_steps(wall, tmp_path, monkeypatch):
    """A validation between two steps is taken out of the rate only if its span is measured on the
    steps' clock; in wall mode (the GPU benchmarks) it was CPU time, so it never fell between two
    steps and was counted as training."""
    monkeypatch.syspath_prepend(str(BENCH))
    import benchlib as B
    import fit_overhead as F
    from step_clock import StepClock   # the class the CLI makes from "step_clock.StepClock"

    monkeypatch.setattr(StepClock, "wall", wall)
    monkeypatch.setattr(StepClock, "wall_sync_at", 2)
    data, model = F.data_args(True, 512), F.model_args(B.TINY_TRANSFORMER, lr=1e-3, warmup=10)
    clock = F.fit_clock(data, model, 60, 1, tmp_path, extra=("--trainer.enable_progress_bar", "false"))
    steps = list(zip(clock.times, clock.times[1:]))
    between = [(start, end) for start, end in clock.validating
               if any(a <= start and end <= b for a, b in steps)]
    before = [(start, end) for start, end in clock.validating if end <= clock.times[0]]   # sanity check
    assert between, ("no validation between two steps: the test needs a shorter epoch", clock.validating,
                     clock.times[:3], clock.times[-3:])
    assert len(between) + len(before) == len(clock.validating), (clock.validating, clock.times)
