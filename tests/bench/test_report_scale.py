"""bench/report_scale.py cannot rot: --quick writes tiny stores, measures every column in fresh
processes and prints its table and SUMMARY line (timings are printed, never asserted)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "report_scale.py"


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_report_scale_quick(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--root", str(tmp_path / "stores")],
                         capture_output=True, text=True, timeout=170)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert text.startswith("CPU: ") and "usable cores" in text
    rows = [line for line in text.splitlines() if re.match(r"\| 12 \| [\d.]+ \|", line)]
    assert len(rows) == 2, text                       # printed as measured, then in the table
    assert "nan" not in rows[0].lower() and "workers" in rows[0]
    summary = [line for line in text.splitlines() if line.startswith("SUMMARY ")]
    assert len(summary) == 1 and summary[0].startswith("SUMMARY report_scale: 12 runs")
    assert not (tmp_path / "stores" / "runs12").exists()      # stores removed unless --keep
