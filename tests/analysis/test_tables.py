"""Table captions say what the compared arms share."""

import pandas as pd

from lit_attention.analysis.tables import caption_text, scoring_note


def _runs(outputs):
    return pd.DataFrame({"model.family": ["rnn", "rnn", "transformer"],
                         "model.scoring": ["dot", "additive", "scaled_dot"],
                         "model.enc_output": outputs})


def test_caption_names_the_encoder_output_every_scoring_arm_attends_over():
    note = scoring_note(_runs(["project", "project", None]))
    assert "model.enc_output = project; one value" in note
    assert "dot and scaled_dot own no parameters" in note
    agg = pd.DataFrame({"n": [2], "n_failed": [0], "n_pruned": [0], "n_other": [0]})
    assert note in caption_text("val_bleu", agg, "CI", None, notes=(note,))


def test_caption_warns_when_scoring_arms_attend_over_different_outputs():
    assert "several values" in scoring_note(_runs(["project", "sum", None]))


def test_no_note_without_scoring_arms_or_recorded_encoder_output():
    assert scoring_note(_runs(["project", None, None])) is None        # one recurrent scoring
    assert scoring_note(pd.DataFrame({"model.scoring": ["dot", "general"]})) is None
