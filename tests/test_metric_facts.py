"""The metric facts: one row per metric and one parser of 'split_metric' names."""

import ast

from conftest import REPO
from lit_attention import metric_facts as mf


def test_names_ranges_and_directions_come_from_the_rows():
    assert mf.metric_label("test_chrf") == "chrF ↑" and mf.metric_label("val_loss") == "Loss ↓"
    assert mf.metric_range("val_bleu") == (0.0, 100.0) and mf.metric_range("val_ppl") == (1.0, None)
    assert mf.metric_range("steps") == (None, None) and mf.metric_label("steps") == "steps ↑"


def test_the_parser_takes_a_split_prefix_only_before_a_name():
    assert mf.parse("val_bleu") == ("val", "bleu") and mf.parse("test_ppl") == ("test", "ppl")
    assert mf.parse("bleu") == (None, "bleu") and mf.parse("val_") == (None, "val_")
    assert mf.parse("grad_norm_median") == (None, "grad_norm_median")
    assert mf.split_of("train_loss") == "train" and mf.base_metric("train_loss") == "loss"


def test_a_metric_without_a_row_is_lower_is_better_when_its_name_says_so():
    assert not mf.higher_is_better("val_ter") and not mf.higher_is_better("train_loss_epoch")
    assert mf.higher_is_better("val_acc") and mf.metric_name("val_acc") == "acc"


def test_bleu_and_chrf_are_scored_from_hypotheses_with_their_own_signature():
    assert mf.SENTENCE_LEVEL == ("bleu", "chrf")
    assert mf.from_hypotheses("test_chrf") and not mf.from_hypotheses("val_ppl")
    assert mf.signature_field("val_chrf") == "chrf_signature"
    assert mf.signature_field("val_bleu") == "sacrebleu_signature"


# -- One home: no module of the analysis states a metric fact again --------------------------------
# A second table of metrics, splits or lower-is-better words, a second function of metric_facts'
# names, or a second parser of 'split_metric' names is a copy the next metric will not be in.

ANALYSIS = REPO / "lit_attention" / "analysis"
FACT_FUNCTIONS = {"split_of", "base_metric", "metric_name", "metric_label", "metric_range",
                  "higher_is_better", "from_hypotheses", "signature_field", "log_axis"}
ALLOWED = {"sentence_stats.py": "the scorer of the sentence-level metrics: its tables of BLEU and "
                                "chrF statistics are their implementation (SENTENCE_LEVEL names them)"}


def metric_fact_copies(source: str) -> list[tuple[int, str]]:
    """(line, what) of each place `source` states a metric fact: a collection literal with two or
    more metric keys, metric names, split prefixes or lower-is-better words; a def of a
    metric_facts function; a (r)partition or split at '_'."""
    groups = [set(mf.METRICS), {m.name for m in mf.METRICS.values()}, set(mf.SPLITS), set(mf.LOWER_IS_BETTER)]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            items = node.keys if isinstance(node, ast.Dict) else node.elts
            strings = {n.value for n in items if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            if any(len(strings & group) >= 2 for group in groups):
                found.append((node.lineno, "table"))
        elif isinstance(node, ast.FunctionDef) and node.name in FACT_FUNCTIONS:
            found.append((node.lineno, node.name))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("partition", "rpartition", "split") and node.args
              and isinstance(node.args[0], ast.Constant) and node.args[0].value == "_"):
            found.append((node.lineno, "parser"))
    return sorted(found)


def test_metric_facts_are_stated_only_in_metric_facts():
    stray = [f"lit_attention/analysis/{path.name}:{line}: {what}" for path in sorted(ANALYSIS.glob("*.py"))
             if path.name not in ("metric_facts.py", *ALLOWED)
             for line, what in metric_fact_copies(path.read_text())]
    assert not stray, "metric facts stated outside lit_attention/metric_facts.py (add a field to its rows):\n" + \
        "\n".join(stray)


def test_the_metric_fact_check_finds_tables_functions_and_parsers():
    source = "\n".join([
        'LOWER = ("loss", "ppl")',                          # 1: a second direction table
        'NAMES = {"BLEU": 1, "chrF": 2}',                   # 2: names
        'SPLITS = {"val": "validation", "test": "test"}',   # 3: splits
        'def higher_is_better(m): return True',             # 4: a second function
        'split, _, kind = column.rpartition("_")',          # 5: a second parser
        'WIDTHS = ("bleu", "width")',                       # 6: one metric: no table
        'x = name.split(".")',                              # 7: not a metric parser
    ])
    assert metric_fact_copies(source) == [(1, "table"), (2, "table"), (3, "table"),
                                          (4, "higher_is_better"), (5, "parser")]
    assert metric_fact_copies((REPO / "lit_attention" / "metric_facts.py").read_text())   # the home holds them
