"""Turn run stores into paper tables and figures.

load -> one tidy DataFrame row per run; aggregate -> one row per configuration (over seeds);
significance -> each configuration vs a baseline (seeds_x_sentences: over seeds x sentences, Student's t
from student_t; calibration: its error rates on simulated experiments), Holm;
tables/plots -> files;
report -> `lit-attention report`. Reads only run stores (or W&B exports) and the registry.
"""
