"""Turn run stores into paper tables and figures.

load -> one tidy DataFrame row per run; aggregate -> one row per configuration (over seeds);
significance -> each configuration vs a baseline (statistics: the test over seeds x sentences,
Student's t, Holm, resampled test sets); tables, captions, plots -> files; effects (--effects),
trials (--trials, --improvement); report -> `lit-attention report`. Reads only run stores (or W&B
exports) and the registry.
"""
