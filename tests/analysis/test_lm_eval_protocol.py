"""The report's caption names the language-model evaluation protocol of the runs it averages
(FIXTURE run stores from tests/analysis_stores.py)."""

from __future__ import annotations

import json

from analysis_stores import write_run
from lit_attention.analysis import report


def lm_run(root, run_id, family, seed, val_ppl, protocol):
    run_dir = write_run(root, "lm", run_id, seed=seed, model={"family": family}, task="files")
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary.update(val_ppl=val_ppl, val_loss=None)
    if protocol:
        summary["eval_protocol"] = protocol
    path.write_text(json.dumps(summary))


def caption(root, tmp_path, capsys) -> str:
    out = tmp_path / "report"
    assert report.main([str(root / "lm"), "--out", str(out), "--metric", "val_ppl", "--baseline", "off",
                        "--no-figures"]) == 0
    capsys.readouterr()
    return (out / "table.md").read_text().strip().splitlines()[-1]


def test_caption_says_which_protocol_every_family_was_scored_with(tmp_path, capsys):
    for family, ppl in (("rnn", 4.8), ("transformer", 5.9), ("ngram", 4.9)):
        for seed in (1, 2):
            lm_run(tmp_path, f"{family}-s{seed}", family, seed, ppl + seed / 10, "sliding window 64, stride 32")
    text = caption(tmp_path, tmp_path, capsys)
    assert "evaluated under one protocol: sliding window 64, stride 32" in text
    assert "no state carried" in text


def test_caption_warns_when_protocols_differ_or_were_not_recorded(tmp_path, capsys):
    lm_run(tmp_path, "rnn-new", "rnn", 1, 4.8, "sliding window 64, stride 32")
    lm_run(tmp_path, "rnn-wide", "rnn", 2, 4.7, "sliding window 256, stride 128")
    lm_run(tmp_path, "transformer-old", "transformer", 1, 5.9, None)
    text = caption(tmp_path, tmp_path, capsys)
    assert ("different protocols (sliding window 256, stride 128; sliding window 64, stride 32; "
            "not recorded): their numbers are not comparable") in text
