"""Runs inside Joey NMT's virtualenv (not ours): Joey's translate with our trained weights, timed by Joey.

    <joey venv>/bin/python bench/joeynmt_decode_driver.py CONFIG WEIGHTS OUTPUT SOURCE

WEIGHTS is a torch file written by bench/decoding.py: ``state`` (our Transformer's tensors under
Joey NMT's parameter names, embedding rows in our token-id order) and ``pieces`` (our piece string
of each token id). This script reorders the embedding rows into Joey's vocabulary (built from the
same pieces), adds Joey's own fixed sinusoid tables, saves the result as a Joey checkpoint and runs
what ``joeynmt translate`` runs on SOURCE as its standard input (one sentence a line, our pieces
space-separated), hypotheses to OUTPUT; Joey loads the checkpoint with a strict
``load_state_dict``, so a name or shape that does not match stops the run. Joey's own "Generation
took" time is what bench/decoding.py reads back, from the last line printed here (JSON). Imports
only Joey NMT and torch: our package is not installed in this virtualenv.
"""

import contextlib
import copy
import json
import logging
import re
import sys
from pathlib import Path

import torch
from joeynmt.config import load_config, parse_global_args
from joeynmt.data import load_data
from joeynmt.model import build_model
from joeynmt.prediction import translate

EMBEDDING_ROWS = ("src_embed.lut.weight", "trg_embed.lut.weight", "decoder.output_layer.weight")


class GenerationTime(logging.Handler):
    """Keeps the seconds of Joey's 'Generation took X[sec].' log line."""

    def __init__(self):
        super().__init__()
        self.seconds = []

    def emit(self, record):
        found = re.search(r"Generation took ([\d.]+)\[sec\]", record.getMessage())
        if found:
            self.seconds.append(float(found.group(1)))


def main() -> None:
    config, weights, output, source = (Path(a) for a in sys.argv[1:5])
    cfg = load_config(config)
    saved = torch.load(weights, map_location="cpu", weights_only=True)
    our_id = {piece: i for i, piece in enumerate(saved["pieces"])}

    args = parse_global_args(copy.deepcopy(cfg), rank=0, mode="test")   # fills Joey's defaults
    src_vocab, trg_vocab, *_ = load_data(args.data, datasets=["test"])
    tokens = trg_vocab._itos                            # Joey's id -> token list
    if src_vocab._itos != tokens:
        sys.exit("the side by side uses one joint vocabulary; Joey built two different ones")
    missing = [t for t in tokens if t not in our_id]
    if missing:
        sys.exit(f"Joey's vocabulary has tokens ours lacks: {missing[:10]}")
    order = torch.tensor([our_id[t] for t in tokens])
    state = {k: (v[order] if k in EMBEDDING_ROWS else v) for k, v in saved["state"].items()}
    fresh = build_model(args.model, src_vocab=src_vocab, trg_vocab=trg_vocab).state_dict()
    for name, tensor in fresh.items():
        if name not in state and name.endswith(".pe.pe"):   # Joey's fixed sinusoid tables (buffers)
            state[name] = tensor

    ckpt = output.parent / "ported.ckpt"
    torch.save({"model_state": state}, ckpt)
    cfg["testing"]["load_model"] = str(ckpt)
    timer = GenerationTime()
    logging.getLogger("joeynmt.prediction").addHandler(timer)   # Joey's loggers do not propagate
    # as `joeynmt translate CONFIG < SOURCE > OUTPUT` (its output_path fails: n_best is read from the
    # wrong part of the config in 2.3.0)
    with open(source, encoding="utf-8") as sys.stdin, open(output, "w", encoding="utf-8") as out:
        with contextlib.redirect_stdout(out):
            translate(cfg)
    if len(timer.seconds) != 1:
        sys.exit(f"expected one 'Generation took' line from Joey NMT, saw {len(timer.seconds)}")
    print(json.dumps({"seconds": timer.seconds[0], "hypotheses": str(output)}))


if __name__ == "__main__":
    main()
