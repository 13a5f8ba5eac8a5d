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

# How a recurrent decoder sees the source: no attention, or one of the two classic wirings
# (where attention enters the decoder). Input feeding (the previous attentional readout joins the
# next input, Luong 2015) is a separate on/off factor, valid with either wiring.
ATTENTION = ("none", "bahdanau", "luong")

# Without attention: the encoder's final state only initialises the decoder ("init"),
# or its context vector is also fed at every decoder step ("every-step").
CONTEXT = ("init", "every-step")

# Recurrent attention scoring of a decoder query s (size Dq) against a key h (size Dk); the
# parameters each scorer owns are exactly those of its formula (no bias), A = attention size:
# dot, scaled_dot 0; general Dq*Dk; low_rank r*(Dq+Dk); additive and concat A*(Dq+Dk+1).
SCORING = {
    "dot": "s^T h",
    "scaled_dot": "s^T h / sqrt(d)",
    "general": "s^T W h (bilinear)",
    "low_rank": "(U s)^T (V h), rank r",
    "additive": "v^T tanh(W1 h + W2 s) (Bahdanau)",
    "concat": "v^T tanh(W [s; h]) (Luong)",
}

# Scorers without parameters: query and key must have the same size.
PARAMETER_FREE_SCORING = ("dot", "scaled_dot")

# What attention attends over (keys and values, the same for every scorer) when the encoder is
# bidirectional: the interface between encoder and attention is its own choice, so that scoring
# arms differ in the scoring function only. Unidirectional encoders give H states; "project"
# still maps them (H -> H), so its arms own the same parameters either way.
ENC_OUTPUT = {
    "concat": "forward and backward states side by side (2H per position)",
    "sum": "forward + backward states (H per position), no parameters",
    "project": "bias-free Linear from the concatenated states to H, shared by every scorer",
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

# Encodings that claim the attention scores depend on relative positions only (i - j).
RELATIVE_POSITIONAL = ("rotary", "alibi", "t5_bias", "shaw")

# What can run on the fused scaled_dot_product_attention kernel: every scoring that is a dot
# product of (projected) queries and keys, and every positional encoding that only moves the
# queries/keys or adds a bias; Shaw's per-pair key embeddings need the explicit path.
FUSED_SCORING = ("scaled_dot", "dot", "general")
FUSED_POSITIONAL = tuple(p for p in POSITIONAL if p != "shaw")

# (positional, scoring) pairs refused everywhere: the encoding claims relative positions, the
# scoring breaks that (shifting every position would change the scores).
INCOMPATIBLE_POSITIONAL_SCORING = {
    ("rotary", "additive"): "rotary makes scores depend on i - j only through a dot product of "
                            "rotated queries and keys; additive scoring tanh(W1 q_i + W2 k_j) of "
                            "rotated vectors depends on the absolute positions",
}

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

# How report tables and figures name a configuration key (a column of the run table: `task` or
# a `model.<field>` of variant_fields / lm_variant_fields). Keys not listed show their field name.
LABELS = {
    "task": "Task", "model.family": "Family", "model.cell": "Cell", "model.attention": "Attention",
    "model.scoring": "Scoring", "model.context": "Context", "model.enc_output": "Enc. output",
    "model.input_feeding": "Input feed.", "model.rank": "Rank", "model.positional": "Positions",
    "model.heads": "Heads", "model.norm": "Norm", "model.ffn": "FFN", "model.d_model": "Width",
    "model.emb_size": "Emb.", "model.enc_layers": "Enc. layers", "model.dec_layers": "Dec. layers",
    "model.layers": "Layers", "model.dropout": "Dropout", "model.label_smoothing": "Label smooth.",
    "model.bidirectional": "Bidir.", "model.teacher_forcing": "Teacher forc.",
    "model.tie_embeddings": "Tied emb.", "model.order": "Order", "model.smoothing": "Smoothing",
    "model.delta": "Delta", "model.discount": "Discount", "model.window": "Window",
}

# Metrics by what follows the split in a summary field (val_bleu -> bleu): the name tables and
# figures give it, and the range its values can take (None: unbounded), to which bars are clipped.
METRICS = {
    "bleu": ("BLEU", (0.0, 100.0)),
    "chrf": ("chrF", (0.0, 100.0)),
    "ppl": ("PPL", (1.0, None)),
    "loss": ("Loss", (0.0, None)),
}


def check(name: str, value: str, valid) -> str:
    """Return ``value`` if it is one of ``valid``, else raise with the list of valid choices."""
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid choices: {', '.join(valid)}")
    return value


def check_positional_scoring(positional: str, scoring: str) -> None:
    """Refuse a Transformer (positional, scoring) pair listed in INCOMPATIBLE_POSITIONAL_SCORING."""
    check("transformer scoring", scoring, TRANSFORMER_SCORING)
    check("positional encoding", positional, POSITIONAL)
    why = INCOMPATIBLE_POSITIONAL_SCORING.get((positional, scoring))
    if why:
        ok = [s for s in TRANSFORMER_SCORING if (positional, s) not in INCOMPATIBLE_POSITIONAL_SCORING]
        raise ValueError(f"positional {positional!r} does not go with scoring {scoring!r}: {why}; "
                         f"use scoring {', '.join(ok)}, or another positional encoding")


def transformer_variants() -> list[tuple[str, str]]:
    """Every (positional, scoring) pair a Transformer may be built with."""
    return [(p, s) for p in POSITIONAL for s in TRANSFORMER_SCORING
            if (p, s) not in INCOMPATIBLE_POSITIONAL_SCORING]


def check_rnn(cell: str, attention: str, scoring: str, context: str = "init",
              input_feeding: bool = False, bidirectional: bool = True,
              enc_output: str = "concat") -> None:
    """Validate one recurrent encoder-decoder configuration: choices and how they combine."""
    check("cell", cell, CELLS)
    check("attention wiring", attention, ATTENTION)
    check("scoring", scoring, SCORING)
    check("context wiring", context, CONTEXT)
    check("encoder output", enc_output, ENC_OUTPUT)
    if attention == "none":
        if input_feeding:
            raise ValueError("model.input_feeding feeds the previous attentional readout to the decoder; "
                             "model.attention 'none' has none: set model.input_feeding false or choose "
                             "an attention wiring")
        return
    if context != "init":
        raise ValueError(f"model.context {context!r} is the no-attention wiring; model.attention "
                         f"{attention!r} already feeds a context at every step: set model.context 'init'")
    if scoring in PARAMETER_FREE_SCORING and bidirectional and enc_output == "concat":
        raise ValueError(f"model.scoring {scoring!r} has no parameters, so keys must have the decoder's "
                         f"size, but a bidirectional encoder with model.enc_output 'concat' gives 2H: "
                         f"set model.enc_output 'sum' or 'project' (the same for every arm of the "
                         f"comparison), or model.bidirectional false")


def check_seq2seq(family: str, cell: str, attention: str, scoring: str, positional: str,
                  context: str = "init", input_feeding: bool = False, bidirectional: bool = True,
                  enc_output: str = "concat") -> None:
    """Validate one encoder-decoder configuration against the registry."""
    check("family", family, FAMILIES)
    if family == "transformer":
        check_positional_scoring(positional, scoring)
    else:
        check_rnn(cell, attention, scoring, context, input_feeding, bidirectional, enc_output)


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
    fields += ("scoring", "enc_output", "input_feeding")
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
        "parameter_free_scoring": list(PARAMETER_FREE_SCORING),
        "enc_output": list(ENC_OUTPUT),
        "transformer_scoring": list(TRANSFORMER_SCORING),
        "positional": list(POSITIONAL),
        "incompatible_positional_scoring": ["+".join(pair) for pair in INCOMPATIBLE_POSITIONAL_SCORING],
        "fused_scoring": list(FUSED_SCORING),
        "fused_positional": list(FUSED_POSITIONAL),
        "norm": list(NORM),
        "tasks": list(TASKS),
        "tokenizers": list(TOKENIZERS),
        "spm_models": list(SPM_MODELS),
    }


# -- Choices outside the model: tracking, and what implements a task or a tokenizer ---------------
# Implementations are named "module:attribute" and imported on use (`implementation`), so that
# the registry stays pure data and the code behind a choice never spells the choice's name.

TRACKING = {
    "none": None,   # the run store only (always written)
    "wandb": "lit_attention.tracking.wandb:make_wandb_logger",   # and a W&B run (offline without a key)
}
NO_TRACKING = "none"   # the default

TASK_GENERATORS = {
    "copy": "lit_attention.data.synthetic:copy_pairs",
    "reverse": "lit_attention.data.synthetic:reverse_pairs",
    "sort": "lit_attention.data.synthetic:sort_pairs",
    "toy-mt": "lit_attention.data.synthetic:toy_mt_pairs",
}
SYNTHETIC_TASKS = tuple(TASK_GENERATORS)
# The task that reads text files (data.data_dir / data.path) instead of generating pairs.
FILES_TASK = "files"

TOKENIZER_CLASSES = {
    "word": "lit_attention.data.tokenizers:WordTokenizer",
    "char": "lit_attention.data.tokenizers:CharTokenizer",
    "sentencepiece": "lit_attention.data.tokenizers:SentencePieceTokenizer",
}

# The ATTENTION choice without attention: the configuration the report compares against by default.
NO_ATTENTION = "none"


def implementation(table: dict, name: str):
    """The object ``table[name]`` names as "module:attribute" (None for an entry of None)."""
    import importlib
    if table[name] is None:
        return None
    module, _, attribute = table[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


# -- Config keys whose value is a choice --------------------------------------------------------
# By kind of model ("seq2seq": TranslationModule + TranslationDataModule, "lm": LanguageModelModule
# + LMDataModule). The training CLI's types and checks, the sweep schema and `lit-attention
# choices` all validate against this table; tests/test_registry.py checks the CLI's types match it.
CONFIG_CHOICES = {
    "seq2seq": {
        "model.family": FAMILIES, "model.cell": CELLS, "model.attention": ATTENTION,
        "model.scoring": tuple(SCORING), "model.context": CONTEXT,
        "model.enc_output": tuple(ENC_OUTPUT), "model.positional": tuple(POSITIONAL),
        "model.norm": NORM,
        "data.task": tuple(TASKS), "data.tokenizer": TOKENIZERS, "data.spm_model": SPM_MODELS,
    },
    "lm": {
        "model.family": LM_FAMILIES, "model.cell": CELLS, "model.positional": tuple(POSITIONAL),
        "model.scoring": TRANSFORMER_SCORING, "model.norm": NORM, "model.smoothing": NGRAM_SMOOTHING,
        "data.task": tuple(TASKS), "data.tokenizer": TOKENIZERS, "data.spm_model": SPM_MODELS,
    },
}
KINDS = tuple(CONFIG_CHOICES)
# Keys a family narrows: (kind, family) -> key -> its valid values.
FAMILY_CHOICES = {("seq2seq", "transformer"): {"model.scoring": TRANSFORMER_SCORING}}


def config_choices(key: str, kind: str, families=None) -> tuple | None:
    """The valid values of config key ``key`` ("model.cell") for ``kind``, narrowed to those some
    family of ``families`` accepts; None when the key's value is not a registry choice."""
    valid = CONFIG_CHOICES[kind].get(key)
    if valid is None or not families:
        return valid
    narrowed = [FAMILY_CHOICES.get((kind, family), {}).get(key, valid) for family in families]
    if len(narrowed) == 1:
        return tuple(narrowed[0])
    return tuple(v for v in valid if any(v in n for n in narrowed))


def check_config(kind: str, group: str, **values) -> None:
    """Refuse a value that is not a choice of its key: ``check_config("lm", "data", task="x")``
    raises "unknown data.task 'x'; valid choices: ..."."""
    for name, value in values.items():
        check(f"{group}.{name}", value, CONFIG_CHOICES[kind][f"{group}.{name}"])
