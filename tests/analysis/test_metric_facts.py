"""The metric facts: one row per metric and one parser of 'split_metric' names."""

from lit_attention.analysis import metric_facts as mf


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
