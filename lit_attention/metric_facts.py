"""What the report knows about a metric, in one place: one row per metric a summary.json records
after its split ('val_bleu' -> split 'val', metric 'bleu'), and the one parser of such names.

A row gives the name tables and figures print, the range its values can take (what intervals and
bars are clipped to; None: unbounded), which way is better, whether it is scored from stored
hypotheses sentence by sentence (a BLEU/chrF test resamples them) or from the per-token losses
of the test text (a language model's test resamples blocks of them), whether its curves need a
log axis, and the summary field holding its sacreBLEU signature. A metric without a row (val_acc) keeps its own name, no range, and is
better when higher unless its name says loss, ppl or ter.
"""

from __future__ import annotations

from dataclasses import dataclass

SPLITS = {"val": "validation", "test": "test", "train": "training"}   # metric prefixes


@dataclass(frozen=True)
class Metric:
    name: str                                   # 'BLEU'
    low: float | None                           # the range its values can take (None: unbounded)
    high: float | None
    higher_is_better: bool
    from_hypotheses: bool = False               # scored per sentence from stored hypotheses
    from_token_losses: bool = False             # a function of the mean per-token NLL
    log_axis: bool = False                      # its curves span orders of magnitude
    signature: str = "sacrebleu_signature"      # the summary field of the scores' signature


METRICS = {
    "bleu": Metric("BLEU", 0.0, 100.0, higher_is_better=True, from_hypotheses=True),
    "chrf": Metric("chrF", 0.0, 100.0, higher_is_better=True, from_hypotheses=True,
                   signature="chrf_signature"),
    "ppl": Metric("PPL", 1.0, None, higher_is_better=False, from_token_losses=True, log_axis=True),
    "loss": Metric("Loss", 0.0, None, higher_is_better=False, from_token_losses=True, log_axis=True),
}
# The metrics sentence_stats scores from hypotheses, sentence by sentence.
SENTENCE_LEVEL = tuple(name for name, row in METRICS.items() if row.from_hypotheses)
# The metrics the seed test scores from per-token losses over token blocks (analysis.statistics).
TOKEN_LEVEL = tuple(name for name, row in METRICS.items() if row.from_token_losses)
LOWER_IS_BETTER = ("loss", "ppl", "ter")   # words that make a metric without a row lower-is-better


def parse(metric: str) -> tuple[str | None, str]:
    """'val_bleu' -> ('val', 'bleu'); a name without a split prefix -> (None, name)."""
    prefix, _, rest = metric.partition("_")
    return (prefix, rest) if prefix in SPLITS and rest else (None, metric)


def split_of(metric: str) -> str | None:
    """'val_bleu' -> 'val'; None for a metric without a split prefix."""
    return parse(metric)[0]


def base_metric(metric: str) -> str:
    """'val_bleu' -> 'bleu': the metric without its split prefix."""
    return parse(metric)[1]


def row(metric: str) -> Metric | None:
    return METRICS.get(base_metric(metric))


def facts(metric: str) -> Metric:
    """The metric's row; for a metric without one, its own name, no range, and better when higher
    unless its name says loss, ppl or ter."""
    lower = any(word in metric.lower() for word in LOWER_IS_BETTER)
    return row(metric) or Metric(base_metric(metric), None, None, higher_is_better=not lower)


def metric_name(metric: str) -> str:
    """The name of a metric without its split: 'test_chrf' -> 'chrF'."""
    return facts(metric).name


def higher_is_better(metric: str) -> bool:
    return facts(metric).higher_is_better


def metric_label(metric: str) -> str:
    """A metric's column header: its name and which way is better ('BLEU ↑', 'PPL ↓')."""
    return f"{metric_name(metric)} {'↑' if higher_is_better(metric) else '↓'}"


def metric_range(metric: str) -> tuple[float | None, float | None]:
    """The lowest and highest value the metric can take (None: unbounded)."""
    return facts(metric).low, facts(metric).high


def from_hypotheses(metric: str) -> bool:
    """Whether the metric is scored from stored hypotheses (BLEU, chrF): decoded, and resampled
    sentence by sentence by a test."""
    return facts(metric).from_hypotheses


def log_axis(metric: str) -> bool:
    """Whether the metric's curves are drawn on a log axis (perplexity, loss)."""
    return facts(metric).log_axis


def signature_field(metric: str) -> str:
    """The summary field of the sacreBLEU signature of the metric's scores."""
    return facts(metric).signature
