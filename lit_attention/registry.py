"""The one list of every ablation choice.

The CLI (config validation), the model builders, the sweep schema and the report tables all read
these tuples; nothing else keeps its own list. Pure data: importing it pulls in no model code.
"""

from __future__ import annotations

# Encoder-decoder families for translation-style tasks.
FAMILIES = ("transformer", "rnn")

# Language-model families.
LM_FAMILIES = ("ngram", "window", "rnn", "transformer")

# n-gram smoothing: add-delta, or interpolated absolute discounting down to an add-delta unigram.
NGRAM_SMOOTHING = ("add", "interp")

# Recurrent cells, shared by the rnn seq2seq family and the rnn language model.
CELLS = ("elman-tanh", "elman-relu", "gru", "lstm")

# How a recurrent decoder sees the source: no attention, or one of the two classic wirings.
ATTENTION = ("none", "bahdanau", "luong")

# Without attention: the encoder's final state only initialises the decoder ("init"),
# or its context vector is also fed at every decoder step ("every-step").
CONTEXT = ("init", "every-step")

SCORING = {
    "dot": "s^T h",
    "scaled_dot": "s^T h / sqrt(d)",
    "general": "s^T W h (bilinear)",
    "low_rank": "(U s)^T (V h), rank r",
    "additive": "v^T tanh(W1 h + W2 s) (Bahdanau)",
    "concat": "v^T tanh(W [s; h]) (Luong)",
}

# Scoring functions the Transformer's self-attention supports.
TRANSFORMER_SCORING = ("scaled_dot", "dot", "general", "additive")

POSITIONAL = {
    "none": "no position information",
    "sinusoidal": "fixed sine/cosine added to embeddings",
    "learned": "learned absolute embeddings",
    "rotary": "rotary position embedding on queries and keys (self-attention)",
    "alibi": "linear distance bias per head (self-attention)",
    "t5_bias": "bucketed relative-position bias (self-attention)",
    "shaw": "relative key embeddings, clipped distance (self-attention)",
}

# What can run on the fused scaled_dot_product_attention kernel: every scoring that is a dot
# product of (projected) queries and keys, and every positional encoding that only moves the
# queries/keys or adds a bias; Shaw's per-pair key embeddings need the explicit path.
FUSED_SCORING = ("scaled_dot", "dot", "general")
FUSED_POSITIONAL = tuple(p for p in POSITIONAL if p != "shaw")

NORM = ("pre", "post")

TASKS = {
    "copy": "synthetic: output equals input",
    "reverse": "synthetic: output is the input reversed",
    "sort": "synthetic: output is the input sorted",
    "toy-mt": "synthetic: small synchronous grammar with reordering and nested clauses",
    "files": "parallel or monolingual text files",
}

TOKENIZERS = ("word", "char", "sentencepiece")
SPM_MODELS = ("unigram", "bpe")


def check(name: str, value: str, valid) -> str:
    """Return ``value`` if it is one of ``valid``, else raise with the list of valid choices."""
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid choices: {', '.join(valid)}")
    return value


def check_seq2seq(family: str, cell: str, attention: str, scoring: str, positional: str,
                  context: str = "init") -> None:
    """Validate one encoder-decoder configuration against the registry."""
    check("family", family, FAMILIES)
    if family == "transformer":
        check("transformer scoring", scoring, TRANSFORMER_SCORING)
        check("positional encoding", positional, POSITIONAL)
    else:
        check("cell", cell, CELLS)
        check("attention wiring", attention, ATTENTION)
        check("scoring", scoring, SCORING)
        check("context wiring", context, CONTEXT)


def variant_fields(family: str, attention: str = "none", scoring: str | None = None) -> tuple[str, ...]:
    """The config fields that describe an encoder-decoder of this family (what a results table shows).

    A Transformer has no cell and a recurrent model no positional encoding: recording only the
    fields that act keeps two runs of the same model in one row of a table.
    """
    common = ("family", "d_model", "enc_layers", "dec_layers", "dropout", "label_smoothing")
    if family == "transformer":
        return common + ("positional", "scoring", "heads", "ffn", "norm", "tie_embeddings")
    fields = common + ("cell", "attention", "emb_size", "bidirectional", "teacher_forcing", "tie_embeddings")
    if attention == "none":
        return fields + ("context",)
    fields += ("scoring",)
    if attention == "luong":
        fields += ("input_feeding",)
    if scoring == "low_rank":
        fields += ("rank",)
    return fields


def lm_variant_fields(family: str) -> tuple[str, ...]:
    """The config fields that describe a language model of this family."""
    if family == "ngram":
        return ("family", "order", "smoothing", "delta", "discount")
    if family == "window":
        return ("family", "window", "d_model", "emb_size", "ffn", "dropout")
    if family == "rnn":
        return ("family", "cell", "d_model", "emb_size", "layers", "dropout", "tie_embeddings")
    return ("family", "positional", "scoring", "norm", "d_model", "heads", "layers", "ffn", "dropout",
            "tie_embeddings")


def as_dict() -> dict:
    """The registry as JSON-ready data (for `lit-attention choices --json`)."""
    return {
        "families": list(FAMILIES),
        "lm_families": list(LM_FAMILIES),
        "ngram_smoothing": list(NGRAM_SMOOTHING),
        "cells": list(CELLS),
        "attention": list(ATTENTION),
        "context": list(CONTEXT),
        "scoring": list(SCORING),
        "transformer_scoring": list(TRANSFORMER_SCORING),
        "positional": list(POSITIONAL),
        "fused_scoring": list(FUSED_SCORING),
        "fused_positional": list(FUSED_POSITIONAL),
        "norm": list(NORM),
        "tasks": list(TASKS),
        "tokenizers": list(TOKENIZERS),
        "spm_models": list(SPM_MODELS),
    }
