"""Turn run stores into paper tables and figures.

load -> one tidy DataFrame row per run; aggregate -> one row per configuration (over seeds);
significance -> each configuration vs a baseline (statistics: the test over seeds x sentences,
Student's t, Holm, resampled test sets); tables, captions, plots -> files; effects (--effects),
trials (--trials, --improvement); report -> `lit-attention report`. Reads only run stores (or W&B
exports) and the registry.

The notebook entry points (docs/REPORT.md): ``load_runs(root)`` one row per run (runs.csv's
columns), ``load_metrics(runs)`` every run's metrics.csv stacked, ``load_wandb("entity/project",
group)`` the same two frames from a W&B project.
"""

from lit_attention.analysis.load import load_gradflow, load_metrics, load_runs, read_hyps
from lit_attention.analysis.wandb_import import load_wandb

__all__ = ["load_gradflow", "load_metrics", "load_runs", "load_wandb", "read_hyps"]
