"""The bench scripts and reference configs cannot rot: each script runs with --quick (tiny sizes, a
few steps) and prints its SUMMARY line; each reference config parses with the training CLI.

The scripts run in this process (runpy) so that torch and Lightning are imported once; timings are
printed by the scripts, never asserted here.
"""

import contextlib
import io
import logging
import math
import os
import re
import runpy
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
SCRIPTS = ["throughput", "decoding", "joeynmt_side_by_side", "gpu_sweep", "fit_overhead", "gpu_throughput"]
REFERENCE_CONFIGS = sorted((REPO / "configs" / "reference").glob("*.yaml"))


def run_script(name: str, monkeypatch, *args: str) -> str:
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setattr(sys, "argv", [str(BENCH / f"{name}.py"), *args])
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    # a script quiets Lightning's loggers for its own process (benchlib.setup): not for the tests
    # that run after it in this one (a data module's "dropped ..." line is logged at info)
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(str(BENCH / f"{name}.py"), run_name="__main__")
        except SystemExit as exc:
            assert exc.code in (None, 0), f"{name} exited with {exc.code}:\n{out.getvalue()[-2000:]}"
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)
    return out.getvalue()


# What each script's SUMMARY line says, every number named (N: a number as the scripts print it).
SUMMARIES = {
    "throughput": r"transformer (?P<tokens_per_s>N) target tokens/s at (?P<mfu_percent>N)% MFU of a "
                  r"(?P<gemm_gflops>N) GFLOP/s fp32 GEMM \(goal >= (?P<mfu_goal>N)%\)"
                  r"; fused projection \+ loss (?P<fused_loss_ratio>N)x the logits-then-loss step"
                  r"(?:; bf16 autocast (?P<bf16_ratio>N)x fp32 \(goal >= (?P<bf16_goal>N)\))?"
                  r"; fastest recurrent row \((?P<row>[^)]+)\) (?P<rnn_ratio>N)x the transformer",
    "decoding": r"greedy (?P<greedy>N) and beam-(?P<beam>N) (?P<beam_rate>N) sentences/s \([^)]+\); "
                r"cached/uncached greedy = (?P<cached_ratio>N)x",
    "joeynmt_side_by_side": r"Joey NMT skipped \(--quick\); ours fp32 (?P<ours>N) target tokens/s"
                            r"; (?:bf16-mixed/fp32 = (?P<bf16_ratio>N)x \(goal >= (?P<bf16_goal>N)\)"
                            r"|bf16-mixed not run)",   # not run: a CPU without native bf16
    "gpu_sweep": r"(?:no GPU, nothing measured|(?P<packed>N) packed trials (?P<tokens_per_s>N) target tok/s = "
                 r"(?P<ratio>N)x one trial \(goal >= (?P<goal>N): (?P<met>met|NOT met)\)"
                 r"(?:; reference sweep (?P<trials>N) trials at (?P<fraction>N) budget (?P<seconds>N) s wall "
                 r"\([^)]+\))?)",
    "fit_overhead": r"fit/plain steps/s = (?P<ratio>N) \(steps of a known batch shape: (?P<known>N)\); "
                    r"goal >= (?P<goal>N): (?P<met>met|NOT met)",
    # without a CUDA GPU (every machine the suite runs on so far): it says so and exits 0
    "gpu_throughput": r"(?:not measured: no CUDA GPU on this machine"
                      r"|(?P<card>[^:]+): fit/plain fp32 (?P<fit_fp32>N)(?:; [\w/ ]+ -?[0-9.]+)*)",
}
NUMBER = r"-?(?:[0-9][0-9,]*(?:\.[0-9]+)?|nan|inf)"
GOAL_OF = {"fit_overhead": ("ratio",)}   # the printed "met" agrees with this ratio against the goal


# over ~2 CPU seconds even with --quick (measured with --cpu-times): not in the fast set
SLOW_SCRIPTS = {"throughput", "fit_overhead"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_SCRIPTS else s
                                  for s in SCRIPTS])
def test_bench_script_quick_prints_summary(name, monkeypatch):
    text = run_script(name, monkeypatch, "--quick")
    summary = [line for line in text.splitlines() if line.startswith("SUMMARY ")]
    assert len(summary) == 1, text[-2000:]
    pattern = f"SUMMARY {name}: " + SUMMARIES[name].replace(">N)", f">{NUMBER})")
    match = re.fullmatch(pattern, summary[0])
    assert match, f"{summary[0]!r} does not read {pattern!r}"
    printed = {k: v for k, v in match.groupdict().items() if v is not None and k not in ("met", "row", "card")}
    values = {k: float(v.replace(",", "")) for k, v in printed.items()}
    for label, value in values.items():
        # an MFU of a few tokens/s on a loaded machine may print as 0.0 %
        low_ok = label == "mfu_percent" and value == 0
        assert math.isfinite(value) and (value > 0 or low_ok), f"{label} = {value} in {summary[0]!r}"
    assert values.get("mfu_percent", 0) <= 100
    if name in GOAL_OF:
        measured = min(values[k] for k in GOAL_OF[name])
        rounding = max(0.5 * 10 ** -len(printed[k].partition(".")[2]) for k in GOAL_OF[name])
        if abs(measured - values["goal"]) > rounding:     # "met" must agree with the printed ratio
            assert (match["met"] == "met") == (measured >= values["goal"]), summary[0]


@pytest.mark.slow
def test_bf16_rows_run_only_on_bf16_hardware_unless_asked(monkeypatch):
    from lit_attention.tracking.machine_speed import cpu_has_native_bf16

    default = run_script("throughput", monkeypatch, "--quick")
    forced = run_script("throughput", monkeypatch, "--quick", "--bf16")
    assert "transformer bf16" in forced
    assert ("transformer bf16" in default) == cpu_has_native_bf16()
    assert ("bf16 rows skipped" in default) != cpu_has_native_bf16()


def test_throughput_steps_both_precisions_in_turn_and_profiles_where_time_goes(monkeypatch):
    text = run_script("throughput", monkeypatch, "--quick", "--bf16", "--no-rnn", "--profile")
    assert re.search(r"round 2/2: transformer [\d.]+ s, transformer, logits then loss [\d.]+ s, "
                     r"transformer bf16 [\d.]+ s; fp32 GEMM", text)
    assert re.search(r"bf16/fp32 per round: [\d.]+, [\d.]+", text)
    assert "rnn " not in text
    kinds = ["matrix products", "copies and dtype casts", "dropout masks", "attention softmax",
             "layer norm", "loss (cross-entropy)", "elementwise and other", "optimizer (clip + Adam)"]
    table = text.split("where a step's time goes")[1]
    shares = [int(m) for kind in kinds for m in re.findall(rf"^{re.escape(kind)} .*?\((\d+)%\)", table, re.M)]
    assert len(shares) == len(kinds) and 95 <= sum(shares) <= 105    # each kind once; shares add up
    assert re.search(r"^loss \(cross-entropy\) +\d+ \((?!0%)\d+%\)", table, re.M)   # found the loss


def test_joey_quick_skips_the_install_and_says_so(monkeypatch):
    text = run_script("joeynmt_side_by_side", monkeypatch, "--quick", "--no-bf16")
    assert "Joey NMT is not installed or run" in text
    assert "Joey NMT skipped (--quick)" in text
    assert text.count("lit-attention 32-true") == 2   # --rounds 2: our fp32 run twice


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


# Joey NMT 2.3's parameter names for the reference Transformer (pre-norm, tied embeddings).
JOEY_PARAMETER = re.compile(
    r"(src_embed|trg_embed)\.lut\.weight|decoder\.output_layer\.weight"
    r"|(encoder|decoder)\.layer_norm\.(weight|bias)"
    r"|(encoder|decoder)\.layers\.\d+\.feed_forward\.(layer_norm|pwff_layer\.[03])\.(weight|bias)"
    r"|encoder\.layers\.\d+\.(layer_norm|src_src_att\.[qkv]_layer|src_src_att\.output_layer)\.(weight|bias)"
    r"|decoder\.layers\.\d+\.(x_layer_norm|dec_layer_norm|(trg_trg_att|src_trg_att)\.([qkv]|output)_layer)"
    r"\.(weight|bias)")


def test_every_reference_transformer_tensor_gets_a_joey_name(monkeypatch):
    """bench/decoding.py hands our weights to Joey NMT under its names; a renamed module of ours
    must fail here, not an hour into a benchmark."""
    from lit_attention.models import build_seq2seq

    monkeypatch.syspath_prepend(str(BENCH))
    decoding = runpy.run_path(str(BENCH / "decoding.py"))
    size = decoding["B"].TRANSFORMER_SIZE
    net = build_seq2seq("transformer", 50, 50, positional="sinusoidal", **size)
    names = list(decoding["joey_state"](net))
    assert len(names) == len(set(names)) == len(net.state_dict())
    unmapped = [n for n in names if not JOEY_PARAMETER.fullmatch(n)]
    assert not unmapped
    per_encoder_layer, per_decoder_layer = 16, 26      # norms and linears, weight + bias each
    assert len(names) == 3 + 4 + size["enc_layers"] * per_encoder_layer + size["dec_layers"] * per_decoder_layer


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_decoding_bench_refuses_a_checkpoint_that_would_run_code(tmp_path, monkeypatch):
    """bench/decoding.py --ckpt loads with weights_only=True: a crafted pickle is refused."""
    import pickle

    import torch
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(BENCH))
    crafted = tmp_path / "best.ckpt"
    torch.save({"hyper_parameters": _RunsCode(), "state_dict": {}}, crafted)
    decoding = runpy.run_path(str(BENCH / "decoding.py"))
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        decoding["load_checkpoint"](str(crafted))
    assert not (tmp_path / "pwned").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_gpu_throughput_runs_every_row_where_it_can_on_the_cpu(monkeypatch):
    """The GPU script's rows, checked on the CPU (--device cpu) so that a GPU call cannot fail on
    a typo; the compiled rows are left to the GPU (torch.compile takes minutes on this CPU)."""
    text = run_script("gpu_throughput", monkeypatch, "--quick", "--device", "cpu", "--no-compile", "--threads", "1")
    for row in ("plain 32-true", "fit 32-true", "fit 32-true, no loader workers", "plain bf16-mixed", "fit bf16-mixed",
                "plain 32-true, padded", "plain bf16-mixed, padded"):
        assert re.search(rf"^{row} +[\d,.]+ +[\d,.]+ +[\d.]+$", text, re.M), (row, text[-2000:])
    assert re.search(r"^SUMMARY gpu_throughput: CPU \(not a GPU figure\): fit/plain fp32 [\d.]+", text, re.M)


@pytest.mark.slow   # fits of `lit-attention fit` on the CPU (5-8 s)
def test_gpu_throughput_profile_part_runs_on_the_cpu(monkeypatch):
    """The GPU profile of `fit`, checked on the CPU (--device cpu) so that a GPU call cannot fail on
    a typo: each run's spans, the main thread's share of them on a CPU, longest steps and waits
    (fp32 also with a shorter GIL switch interval), and fp32's Python profile."""
    interval = sys.getswitchinterval()
    text = run_script("gpu_throughput", monkeypatch, "--quick", "--device", "cpu", "--threads", "1", "--part", "profile")
    runs = ("32-true", "32-true, GIL switch interval 0.5 ms", "bf16-mixed")
    for run in runs:
        assert re.search(rf"^fit {run}: 8 steps; inside the step median [\d.]+ ms", text, re.M), text[-3000:]
    assert re.search(r"^fit 32-true, cProfile, top by own time:\n(.*\n)? +ncalls +tottime", text, re.M), text[-3000:]
    assert len(re.findall(r"^  host waits for the device: 0 \(0.00 a step\)$", text, re.M)) == 3
    # the main thread's share of each span on a CPU: plain loop (2), each fit inside and over its steps (3 x 2)
    shares = re.findall(r"main thread on a CPU (?:a median )?(\d+) % of the", text)
    assert len(shares) == 8 and all(0 < int(share) <= 101 for share in shares), text[-3000:]
    # the switch interval is set for its run only
    usual = f"{1000 * interval:g} ms"
    assert re.findall(r"^  Python threads: .*MainThread.*; GIL switch interval (.*)$", text, re.M) == [
        usual, "0.5 ms", usual], text[-3000:]
    assert re.search(r"^SUMMARY gpu_throughput: .*; 32-true, GIL switch interval 0.5 ms: fit median inside", text, re.M)
    assert sys.getswitchinterval() == interval
    # the toy data's epochs end within the 12 steps: their validations and checkpoints are timed
    assert len(re.findall(r"^  epoch ends: [1-9]\d* validations, median [\d.]+ ms; [1-9]\d* checkpoint saves",
                          text, re.M)) == 3, text[-3000:]
    assert "fit 32-true, padded, graph_step: not run (it replays CUDA graphs)" in text
    ends = re.findall(r"^  an epoch's end \(before its next step\): (\d+) ms = validation (\d+) \+ checkpoint saves "
                      r"(\d+) \+ the rest (-?\d+) ", text, re.M)
    assert ends and all(int(validation) + int(saves) <= int(total) + 1 for total, validation, saves, _ in ends), text[-3000:]
    assert re.search(r"^SUMMARY gpu_throughput: CPU \(not a GPU figure\): step profile: 32-true: plain [\d.]+ ms",
                     text, re.M)


@pytest.mark.slow   # fits of `lit-attention fit` on the CPU (5-8 s)
def test_gpu_throughput_writes_part_runs_on_the_cpu(monkeypatch):
    """The writer-thread comparison, checked on the CPU (--device cpu) so that a GPU call cannot
    fail on a typo: three fits, each with its rate, spans, checkpoint saves and longest steps, and the
    ratios."""
    text = run_script("gpu_throughput", monkeypatch, "--quick", "--device", "cpu", "--threads", "1", "--part", "writes")
    for label in ("writer thread", "in line", "writer thread again"):
        assert re.search(rf"^{label}: [\d.]+ steps/s; inside the step mean [\d.]+ ms, median [\d.]+; between "
                         rf"steps mean [\d.]+ ms; [1-9]\d* checkpoint saves, median [\d.]+ ms; longest \(ms inside "
                         rf"\+ between\): (\d+: \d+\+\d+(, )?){{5}}$",
                         text, re.M), (label, text[-3000:])
    assert re.search(r"^SUMMARY gpu_throughput: CPU \(not a GPU figure\): checkpoint writes: writer thread/in line steps/s "
                     r"[\d.]+, again [\d.]+$", text, re.M)
