"""The notebook path: the package's own names load run stores into tidy frames (the five-line
example of docs/ANALYSIS.md, run as a fresh Python process would)."""

import subprocess
import sys

from analysis_stores import write_run

EXAMPLE = '''
from lit_attention.analysis import load_runs, load_metrics
runs = load_runs("{root}")                      # one row per run: runs.csv's columns
curves = load_metrics(runs)                     # every run's metrics.csv, one row per logged step
print(runs.groupby("model.attention")["val_bleu"].agg(["mean", "count"]).to_csv())
print(curves.pivot_table(index="step", columns="run_id", values="val_bleu").to_csv())
'''


def test_the_five_line_example_loads_runs_and_curves(tmp_path):
    for seed, attention in ((1, "none"), (2, "none"), (1, "luong")):
        write_run(tmp_path, "demo", f"{attention}-s{seed}", seed=seed, val_bleu=10.0 * seed + (attention == "luong"),
                  model=dict(family="rnn", attention=attention))
    out = subprocess.run([sys.executable, "-c", EXAMPLE.format(root=tmp_path / "demo")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    means, curves = out.stdout.strip().split("\n\n")
    assert means.splitlines() == ["model.attention,mean,count", "luong,11.0,1", "none,15.0,2"]
    assert curves.splitlines()[0] == "step,luong-s1,none-s1,none-s2"
    assert [line.split(",")[0] for line in curves.splitlines()[1:]] == ["10", "20", "30"]


def test_load_wandb_is_the_packages_name_for_the_w_and_b_loader():
    from lit_attention import analysis
    from lit_attention.analysis import wandb_import

    assert analysis.load_wandb is wandb_import.load_wandb
