"""The bench scripts and reference configs cannot rot: each script runs with --quick (tiny sizes, a
few steps) and prints its SUMMARY line; each reference config parses with the training CLI.

The scripts run in this process (runpy) so that torch and Lightning are imported once; timings are
printed by the scripts, never asserted here.
"""

import contextlib
import io
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
SCRIPTS = ["lightning_overhead", "attention_path", "throughput", "decoding", "joeynmt_side_by_side"]
REFERENCE_CONFIGS = sorted((REPO / "configs" / "reference").glob("*.yaml"))


def run_script(name: str, monkeypatch, *args: str) -> str:
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setattr(sys, "argv", [str(BENCH / f"{name}.py"), *args])
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(str(BENCH / f"{name}.py"), run_name="__main__")
        except SystemExit as exc:
            assert exc.code in (None, 0), f"{name} exited with {exc.code}:\n{out.getvalue()[-2000:]}"
    return out.getvalue()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", SCRIPTS)
def test_bench_script_quick_prints_summary(name, monkeypatch):
    text = run_script(name, monkeypatch, "--quick")
    summary = [line for line in text.splitlines() if line.startswith("SUMMARY ")]
    assert len(summary) == 1, text[-2000:]
    assert summary[0].startswith(f"SUMMARY {name}:")
    assert "nan" not in summary[0].lower()


def test_joey_quick_skips_the_install_and_says_so(monkeypatch):
    text = run_script("joeynmt_side_by_side", monkeypatch, "--quick", "--no-bf16")
    assert "Joey NMT is not installed or run" in text
    assert "Joey NMT skipped (--quick)" in text


def test_reference_configs_cover_the_issue():
    names = {p.stem for p in REFERENCE_CONFIGS}
    assert names >= {"multi30k-transformer", "multi30k-lstm-additive", "multi30k-gru-additive",
                     "multi30k-lstm-general", "multi30k-gru-general", "multi30k-lstm-noattn",
                     "multi30k-elman-tanh", "shakespeare-transformer", "shakespeare-lstm",
                     "shakespeare-ngram"}


@pytest.mark.parametrize("config", REFERENCE_CONFIGS, ids=lambda p: p.stem)
def test_reference_config_parses(config, monkeypatch):
    from lit_attention.cli import main

    monkeypatch.chdir(REPO)
    args = ["fit", "--config", str(config), "--print_config"]
    monkeypatch.setattr(sys, "argv", ["lit-attention", *args])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        with pytest.raises(SystemExit) as exc:
            main()
    assert exc.value.code in (None, 0)
    text = out.getvalue()
    assert "class_path: lit_attention.lightning." in text
    assert "seed_everything: 1" in text
