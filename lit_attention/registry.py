"""The one list of every ablation choice: each choice is one row (``Choice``) naming its
implementation and its properties, each model family one ``Family`` with its options' defaults.

The CLI (config validation), the model builders, the sweep schema and the report tables all read
these tables; nothing else keeps its own list or spells a choice's name. Pure data at the bottom
of the layers: importing it pulls in no model code; a row names its implementation as
"module:attribute", which the layer that builds it imports on use (``implementation``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Callable, Mapping

# The model families (FAMILIES: encoder-decoders, LM_FAMILIES: language models), their classes
# and the options each uses are declared once, in SEQ2SEQ_MODELS and LM_MODELS below.


class Choice:
    """One value a choice key takes: its name, what it is, what implements it, and its properties.

    ``Choice("dot", "s^T h", "lit_attention.models.scoring:Dot", parameter_free=True)``.
    impl: "package.module:attribute" of what implements it, imported on use by the layer that
        builds it (``implementation``), so the registry stays pure data; None where the choice is
        a property only. The implementation never spells the choice's name.
    properties: whatever code needs to know about the choice, read as attributes
        (``SCORING[name].parameter_free``), so that no code branches on a name. Every row of a
        table has the same properties (``table``). ``options``, where a table has it, names the
        config keys (model.<key>) the implementation reads: they act only with this choice.
    """

    def __init__(self, name: str, says: str, impl: str | None = None, **properties: Any):
        self.name, self.says, self.impl = name, says, impl
        self.properties = properties
        vars(self).update(properties)

    def __repr__(self) -> str:
        return f"Choice({self.name!r})"


def table(*rows: Choice) -> dict[str, Choice]:
    """name -> row, refusing a table whose rows do not all have the same properties."""
    kinds = {tuple(sorted(row.properties)) for row in rows}
    if len(kinds) > 1:
        raise TypeError(f"the rows {[row.name for row in rows]} have different properties: {kinds}")
    return {row.name: row for row in rows}


def having(rows: Mapping[str, Choice], **properties: Any) -> tuple[str, ...]:
    """The names of the rows whose properties have these values."""
    return tuple(n for n, row in rows.items() if all(getattr(row, k) == v for k, v in properties.items()))


_MODELS = "lit_attention.models"

# n-gram smoothing: add-delta, or interpolated absolute discounting down to an add-delta unigram.
NGRAM_SMOOTHING = table(
    Choice("add", "add-delta on the highest order only", f"{_MODELS}.lm.ngram:NGramLM.add_delta"),
    Choice("interp", "interpolated absolute discounting down to an add-delta unigram",
           f"{_MODELS}.lm.ngram:NGramLM.interpolated"),
)

# Recurrent cells, shared by the rnn seq2seq family and the rnn language model: the torch.nn
# module and the arguments that make it that cell.
CELLS = table(
    Choice("elman-tanh", "Elman RNN, tanh", "torch.nn:RNN", arguments={"nonlinearity": "tanh"}),
    Choice("elman-relu", "Elman RNN, ReLU", "torch.nn:RNN", arguments={"nonlinearity": "relu"}),
    Choice("gru", "gated recurrent unit", "torch.nn:GRU", arguments={}),
    Choice("lstm", "long short-term memory (state h and c)", "torch.nn:LSTM", arguments={}),
)

# How a recurrent decoder sees the source: no attention, or one of the two classic wirings
# (where attention enters the decoder; lit_attention/models/rnn.py). Input feeding (the previous
# attentional readout joins the next input, Luong 2015) is a separate on/off factor, valid with
# either wiring.
_RNN = f"{_MODELS}.rnn"
ATTENTION = table(
    Choice("none", "no attention: the encoder's final state starts the decoder",
           f"{_RNN}:NO_ATTENTION", attends=False),
    Choice("bahdanau", "query s_(t-1); the context joins the RNN input", f"{_RNN}:BAHDANAU",
           attends=True),
    Choice("luong", "query s_t; the context joins the readout", f"{_RNN}:LUONG", attends=True),
)

# Without attention: the encoder's final state only initialises the decoder ("init"),
# or its context vector is also fed at every decoder step ("every-step").
CONTEXT = table(
    Choice("init", "the encoder's final state initialises the decoder", every_step=False),
    Choice("every-step", "... and is fed at every decoder step (Cho 2014)", every_step=True),
)

# Recurrent attention scoring of a decoder query s (size Dq) against a key h (size Dk); the
# parameters each scorer owns are exactly those of its formula (no bias), A = attention size:
# dot, scaled_dot 0; general Dq*Dk; low_rank r*(Dq+Dk); additive and concat A*(Dq+Dk+1).
# Scorers without parameters (parameter_free): query and key must have the same size.
_SCORER = f"{_MODELS}.scoring"
SCORING = table(
    Choice("dot", "s^T h", f"{_SCORER}:Dot", parameter_free=True, options=()),
    Choice("scaled_dot", "s^T h / sqrt(d)", f"{_SCORER}:ScaledDot", parameter_free=True, options=()),
    Choice("general", "s^T W h (bilinear)", f"{_SCORER}:General", parameter_free=False, options=()),
    Choice("low_rank", "(U s)^T (V h), rank r", f"{_SCORER}:LowRank", parameter_free=False,
           options=("rank",)),
    Choice("additive", "v^T tanh(W1 h + W2 s) (Bahdanau)", f"{_SCORER}:Additive", parameter_free=False,
           options=()),
    Choice("concat", "v^T tanh(W [s; h]) (Luong)", f"{_SCORER}:Concat", parameter_free=False, options=()),
)
PARAMETER_FREE_SCORING = having(SCORING, parameter_free=True)

# What attention attends over (keys and values, the same for every scorer) when the encoder is
# bidirectional: the interface between encoder and attention is its own choice, so that scoring
# arms differ in the scoring function only. Unidirectional encoders give H states; "project"
# still maps them (H -> H), so its arms own the same parameters either way.
ENC_OUTPUT = table(
    Choice("concat", "forward and backward states side by side (2H per position)",
           f"{_RNN}:CONCAT_DIRECTIONS"),
    Choice("sum", "forward + backward states (H per position), no parameters", f"{_RNN}:SUM_DIRECTIONS"),
    Choice("project", "bias-free Linear from the concatenated states to H, shared by every scorer",
           f"{_RNN}:PROJECT_DIRECTIONS"),
)

# Scoring functions of the Transformer's heads (lit_attention/models/attention.py). fused: a dot
# product of (projected) queries and keys, which the fused scaled_dot_product_attention kernel
# computes.
_HEADS = f"{_MODELS}.attention"
TRANSFORMER_SCORING = table(
    Choice("scaled_dot", "q . k / sqrt(d)", f"{_HEADS}:SCALED_DOT_HEADS", fused=True),
    Choice("dot", "q . k", f"{_HEADS}:DOT_HEADS", fused=True),
    Choice("general", "q^T W k", f"{_HEADS}:GENERAL_HEADS", fused=True),
    Choice("additive", "v^T tanh(W1 q + W2 k)", f"{_HEADS}:ADDITIVE_HEADS", fused=False),
)
FUSED_SCORING = having(TRANSFORMER_SCORING, fused=True)

# Position information of the Transformer (lit_attention/models/positional.py). acts_on: where it
# acts, which fixes how its implementation is built: "embeddings" (absolute vectors added to token
# embeddings, impl(max_len, d_model)), "rotation" (of self-attention queries and keys, impl(x,
# positions)), "bias" (added to self-attention scores, impl(heads, causal, **options)), "keys"
# (relative key vectors, impl(d_head, **options)), or None (nowhere). relative: the scores depend
# on relative positions only (i - j). fused: it runs on the fused attention kernel (it only moves
# queries/keys or adds a bias; Shaw's per-pair key vectors need the explicit path).
_POSITIONS = f"{_MODELS}.positional"
POSITIONAL = table(
    Choice("none", "no position information", None, acts_on=None, relative=False, fused=True,
           options=()),
    Choice("sinusoidal", "fixed sine/cosine added to embeddings", f"{_POSITIONS}:SinusoidalPositions",
           acts_on="embeddings", relative=False, fused=True, options=()),
    Choice("learned", "learned absolute embeddings", f"{_POSITIONS}:LearnedPositions",
           acts_on="embeddings", relative=False, fused=True, options=()),
    Choice("rotary", "rotary position embedding on queries and keys (self-attention)",
           f"{_POSITIONS}:rotary", acts_on="rotation", relative=True, fused=True, options=()),
    Choice("alibi", "linear distance bias per head (self-attention)", f"{_POSITIONS}:AlibiBias",
           acts_on="bias", relative=True, fused=True, options=()),
    Choice("t5_bias", "bucketed relative-position bias (self-attention)", f"{_POSITIONS}:T5Bias",
           acts_on="bias", relative=True, fused=True, options=("rel_buckets", "rel_max_distance")),
    Choice("shaw", "relative key embeddings, clipped distance (self-attention)",
           f"{_POSITIONS}:ShawRelative", acts_on="keys", relative=True, fused=False,
           options=("shaw_clip",)),
)
RELATIVE_POSITIONAL = having(POSITIONAL, relative=True)
FUSED_POSITIONAL = having(POSITIONAL, fused=True)

# (positional, scoring) pairs refused everywhere: the encoding claims relative positions, the
# scoring breaks that (shifting every position would change the scores).
INCOMPATIBLE_POSITIONAL_SCORING = {
    ("rotary", "additive"): "rotary makes scores depend on i - j only through a dot product of "
                            "rotated queries and keys; additive scoring tanh(W1 q_i + W2 k_j) of "
                            "rotated vectors depends on the absolute positions",
}

# Where the Transformer's LayerNorm sits: before each residual branch (the stack then ends in one
# more LayerNorm), or after each residual sum.
NORM = table(
    Choice("pre", "LayerNorm before each residual branch, and at the end of the stack", pre_norm=True),
    Choice("post", "LayerNorm after each residual sum", pre_norm=False),
)

# impl: the synthetic task's pair generator (lit_attention/data/synthetic.py), None for FILES_TASK.
# symbols: its sentences are drawn from data.n_symbols symbols (toy-mt's from its grammar's words).
_DATA = "lit_attention.data"
TASKS = table(
    Choice("copy", "synthetic: output equals input", f"{_DATA}.synthetic:copy_pairs", symbols=True),
    Choice("reverse", "synthetic: output is the input reversed", f"{_DATA}.synthetic:reverse_pairs", symbols=True),
    Choice("sort", "synthetic: output is the input sorted", f"{_DATA}.synthetic:sort_pairs", symbols=True),
    Choice("toy-mt", "synthetic: small synchronous grammar with reordering and nested clauses",
           f"{_DATA}.synthetic:toy_mt_pairs", symbols=False),
    Choice("files", "parallel or monolingual text files", symbols=False),
)
# The task that reads text files (data.data_dir / data.path) instead of generating pairs.
FILES_TASK = "files"
SYNTHETIC_TASKS = tuple(name for name, row in TASKS.items() if row.impl is not None)

# options: the data.<key> options the tokenizer reads besides data.vocab_size (which caps the word
# and character vocabularies too): they act only with it.
TOKENIZERS = table(
    Choice("word", "whitespace-separated words", f"{_DATA}.tokenizers:WordTokenizer", options=()),
    Choice("char", "characters", f"{_DATA}.tokenizers:CharTokenizer", options=()),
    Choice("sentencepiece", "a SentencePiece model trained on the training split",
           f"{_DATA}.tokenizers:SentencePieceTokenizer", options=("spm_model",)),
)
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

def check(name: str, value: str, valid) -> str:
    """Return ``value`` if it is one of ``valid``, else raise with the list of valid choices."""
    if value not in tuple(valid):   # a tuple: an unhashable value is refused like any other
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


def check_rnn(cell: str, attention: str, scoring: str, context: str, input_feeding: bool,
              bidirectional: bool, enc_output: str) -> None:
    """Validate one recurrent encoder-decoder configuration: choices and how they combine."""
    for what, value, rows in (("cell", cell, CELLS), ("attention wiring", attention, ATTENTION),
                              ("scoring", scoring, SCORING), ("context wiring", context, CONTEXT),
                              ("encoder output", enc_output, ENC_OUTPUT)):
        check(what, value, rows)
    if not ATTENTION[attention].attends:
        if input_feeding:
            raise ValueError("model.input_feeding feeds the previous attentional readout to the decoder; "
                             "model.attention 'none' has none: leave model.input_feeding unset (false) or "
                             "choose an attention wiring")
        return
    if CONTEXT[context].every_step:
        raise ValueError(f"model.context {context!r} is the no-attention wiring; model.attention "
                         f"{attention!r} already feeds a context at every step: leave model.context unset")
    if SCORING[scoring].parameter_free and bidirectional and enc_output == "concat":
        raise ValueError(f"model.scoring {scoring!r} has no parameters, so keys must have the decoder's "
                         f"size, but a bidirectional encoder with model.enc_output 'concat' gives 2H: "
                         f"set model.enc_output 'sum' or 'project' (the same for every arm of the "
                         f"comparison), or model.bidirectional false")


# ---- Knobs: one name per concept, in every family and at every level --------------------------
# The same name is the config key (model.<name>), the LightningModule argument and the model
# constructor's argument (docs/CONFIG.md has this table for users):
#   d_model       the model's width: the Transformer's d_model, the recurrent hidden size (per
#                 direction), the window LM's hidden layer
#   emb_size      token embedding size of recurrent and window models (the Transformer's is d_model)
#   ffn           the Transformer's feed-forward inner size (Transformer only)
#   heads         attention heads (Transformer only)
#   layers        layers of a language model; enc_layers / dec_layers of an encoder-decoder
# Names used before, refused with a did-you-mean naming the new one (lit_attention/config_check.py),
# never read as aliases:
RENAMED = {"hidden_size": "d_model", "d_hidden": "d_model", "width": "d_model", "d_embed": "emb_size"}

# An option left unset whose family default is None takes the value of another option.
DERIVED = {"emb_size": "d_model"}

# Options that shape training, not the network: they describe a run, but no model constructor
# takes them.
TRAINING_OPTIONS = ("label_smoothing", "teacher_forcing")

# Constructor options that do not tell two models apart (set from the data): not in summaries.
UNRECORDED_OPTIONS = ("max_len",)

# Settings (config keys) that act only where a model learns by gradient descent: the optimizer and
# its schedule, gradient clipping and accumulation, budgets counted in optimizer steps or in the
# tokens and FLOPs of training steps, gradient norms. A family without a gradient (Family.gradient
# False: counted from the training stream) would ignore them, so the training CLI refuses them.
GRADIENT_SETTINGS = ("model.lr", "model.warmup", "model.betas", "model.weight_decay",
                     "trainer.gradient_clip_val", "trainer.gradient_clip_algorithm",
                     "trainer.accumulate_grad_batches", "budget.steps", "budget.tokens", "budget.flops",
                     "diagnostics.module_norm_every", "diagnostics.module_depth")


@dataclass(frozen=True)
class Family:
    """A model family: its class and the model.* options it uses.

    model: "package.module:Class", imported only when a model is built (lit_attention.models).
    options: option -> the family's default, taken when the option is left unset (None). Every
        option of another family must stay unset: setting one is a configuration error.
    check: validates how the resolved options combine (raises ValueError).
    active_when: option -> (other option, its values under which the option acts); set while it
        does not act, an option is refused like one of another family.
    moved: option of other families this family used to read -> the option it reads now.
    gradient: False for a family that is counted from the training stream, not trained.
    fixed: constructor arguments the family fixes that are not config keys (yet), and their values.
    graphable: its training step reads no value back to the host, so ``model.graph_step`` can
        capture it in CUDA graphs (lightning/graphed_step.py); a packed recurrent encoder reads
        its lengths.
    """
    model: str
    options: Mapping[str, Any]
    check: Callable[[Mapping[str, Any]], None] = lambda options: None
    active_when: Mapping[str, tuple[str, tuple]] = field(default_factory=dict)
    moved: Mapping[str, str] = field(default_factory=dict)
    gradient: bool = True
    fixed: Mapping[str, Any] = field(default_factory=dict)
    graphable: bool = False


# Options every encoder-decoder family uses, and their defaults (the LightningModule's).
SEQ2SEQ_COMMON = {"d_model": 256, "enc_layers": 3, "dec_layers": 3, "dropout": 0.1, "label_smoothing": 0.1}

_ATTENDING = having(ATTENTION, attends=True)


def reading(rows: Mapping[str, Choice], option: str) -> tuple[str, ...]:
    """The choices of ``rows`` whose implementation reads config key ``option`` (row.options)."""
    return tuple(name for name, row in rows.items() if option in row.options)


# The Transformer's knobs of one positional encoding: each acts with the encodings that read it.
POSITIONAL_OPTIONS = {"rel_buckets": 32, "rel_max_distance": 128, "shaw_clip": 16}
_POSITIONAL_ACTIVE = {k: ("positional", reading(POSITIONAL, k)) for k in POSITIONAL_OPTIONS}

SEQ2SEQ_MODELS = {
    "transformer": Family(
        model="lit_attention.models.transformer:TransformerSeq2Seq",
        options={"positional": "sinusoidal", "scoring": "scaled_dot", "heads": 4, "ffn": 1024,
                 "norm": "pre", "tie_embeddings": True, "share_embeddings": True, **POSITIONAL_OPTIONS},
        check=lambda o: check_positional_scoring(o["positional"], o["scoring"]),
        active_when=_POSITIONAL_ACTIVE,
        # the position tables' size: model.max_len would clash with data.max_len (a token filter)
        # in the hparams Lightning merges, so it waits for a name of its own
        fixed={"max_len": 512},
        graphable=True),
    "rnn": Family(
        model="lit_attention.models.rnn:RNNSeq2Seq",
        options={"cell": "lstm", "attention": "bahdanau", "emb_size": None, "bidirectional": True,
                 "teacher_forcing": 1.0, "tie_embeddings": True, "context": "init",
                 "scoring": "additive", "enc_output": "concat", "input_feeding": False, "rank": 32},
        check=lambda o: check_rnn(o["cell"], o["attention"], o["scoring"], o["context"],
                                  o["input_feeding"], o["bidirectional"], o["enc_output"]),
        active_when={"context": ("attention", ("none",)), "scoring": ("attention", _ATTENDING),
                     "enc_output": ("attention", _ATTENDING),
                     "input_feeding": ("attention", _ATTENDING), "rank": ("scoring", reading(SCORING, "rank"))}),
}
FAMILIES = tuple(SEQ2SEQ_MODELS)

LM_MODELS = {
    "ngram": Family(
        model="lit_attention.models.lm.ngram:NGramLM",
        options={"order": 3, "smoothing": "interp", "delta": 0.1, "discount": 0.75},
        check=lambda o: check("n-gram smoothing", o["smoothing"], NGRAM_SMOOTHING),
        gradient=False),
    "window": Family(
        model="lit_attention.models.lm.window:WindowLM",
        options={"window": 5, "d_model": 512, "emb_size": 128, "dropout": 0.1},
        moved={"ffn": "d_model"}),
    "rnn": Family(
        model="lit_attention.models.lm.rnn_lm:RNNLM",
        options={"cell": "lstm", "d_model": 128, "emb_size": None, "layers": 4, "dropout": 0.1,
                 "tie_embeddings": True},
        check=lambda o: check("cell", o["cell"], CELLS)),
    "transformer": Family(
        model="lit_attention.models.lm.transformer_lm:TransformerLM",
        options={"positional": "sinusoidal", "scoring": "scaled_dot", "norm": "pre", "d_model": 128,
                 "heads": 4, "layers": 4, "ffn": 512, "dropout": 0.1, "tie_embeddings": True,
                 "max_len": 512, **POSITIONAL_OPTIONS},
        check=lambda o: check_positional_scoring(o["positional"], o["scoring"]),
        active_when=_POSITIONAL_ACTIVE),
}
LM_FAMILIES = tuple(LM_MODELS)


def family_options(families: Mapping[str, Family]) -> tuple[str, ...]:
    """Every option some family of ``families`` uses (each once, in order of appearance)."""
    return tuple(dict.fromkeys(k for f in families.values() for k in f.options))


def _acts(spec: Family, option: str, values: Mapping[str, Any]) -> bool:
    other, when = spec.active_when.get(option, (None, None))
    return other is None or values.get(other) in when


def resolve(families: Mapping[str, Family], family: str, given: Mapping[str, Any],
            shared: Mapping[str, Any] | None = None, what: str = "family") -> dict[str, Any]:
    """The options ``family`` uses that act, each as given or the family's default.

    ``given`` maps the options of ``families`` to values, None meaning unset; ``shared`` holds the
    options every family uses (SEQ2SEQ_COMMON), which DERIVED defaults may name. Refuses
    (ValueError) an option that is set but belongs to other families only, or does not act.
    """
    spec = families[check(what, family, families)]
    for key, value in given.items():
        if value is None or key in spec.options:
            continue
        if key in spec.moved:
            raise ValueError(f"option model.{key} is not one of {what} {family!r}: it reads "
                             f"model.{spec.moved[key]} instead (docs/CONFIG.md)")
        owners = [name for name, f in families.items() if key in f.options]
        raise ValueError(f"option model.{key} is not one of {what} {family!r}, only of {', '.join(owners)}: "
                         f"leave it unset (remove it from the config, or --model.{key} null)")
    values = _derive({k: default if given.get(k) is None else given[k]
                      for k, default in spec.options.items()}, shared or {})
    spec.check(values)
    for key in spec.options:
        if given.get(key) is not None and not _acts(spec, key, values):
            other, when = spec.active_when[key]
            raise ValueError(f"option model.{key} acts only with model.{other} "
                             f"{' or '.join(map(str, when))} (here {values[other]!r}): leave it unset")
    return {k: v for k, v in values.items() if _acts(spec, k, values)}


def variant_fields(family: str, options: Mapping[str, Any]) -> tuple[str, ...]:
    """The config fields that describe an encoder-decoder of this family (what a results table shows).

    A Transformer has no cell and a recurrent model no positional encoding: recording only the
    fields that act (given the resolved ``options``) keeps two runs of the same model in one row.
    """
    spec = SEQ2SEQ_MODELS[check("family", family, SEQ2SEQ_MODELS)]
    return ("family", *SEQ2SEQ_COMMON, *_recorded(spec, options))


def lm_variant_fields(family: str, options: Mapping[str, Any]) -> tuple[str, ...]:
    """The config fields that describe a language model of this family (those that act)."""
    spec = LM_MODELS[check("language-model family", family, LM_MODELS)]
    return ("family", *_recorded(spec, options))


def _recorded(spec: Family, options: Mapping[str, Any]):
    return (k for k in spec.options if k not in UNRECORDED_OPTIONS and _acts(spec, k, options))


def defaults(families: Mapping[str, Family], family: str, given: Mapping[str, Any],
             shared: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of the model of ``family`` (a name of ``families``) but its vocabulary sizes:
    each as ``given`` where set (not None), else the registry's default, the family's or that of
    ``shared`` (SEQ2SEQ_COMMON, or none), whether the option acts or not: the registry's defaults
    are the only ones (model constructors have none). Training-only options are left out."""
    spec = families[family]
    values = {k: v for k, v in {**shared, **spec.options, **spec.fixed}.items() if k not in TRAINING_OPTIONS}
    values.update({k: v for k, v in given.items() if v is not None})
    return _derive(values, {})


def _derive(values: dict[str, Any], shared: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with the DERIVED options left unset (None) set from their source, in ``values``
    or else in ``shared``."""
    for key, source in DERIVED.items():
        if key in values and values[key] is None:
            values[key] = {**shared, **values}[source]
    return values


def as_dict() -> dict:
    """The registry as JSON-ready data (for `lit-attention choices --json`)."""
    names = dict(
        families=FAMILIES, lm_families=LM_FAMILIES, ngram_smoothing=NGRAM_SMOOTHING, cells=CELLS,
        attention=ATTENTION, context=CONTEXT, scoring=SCORING, parameter_free_scoring=PARAMETER_FREE_SCORING,
        enc_output=ENC_OUTPUT, transformer_scoring=TRANSFORMER_SCORING, positional=POSITIONAL,
        incompatible_positional_scoring=["+".join(pair) for pair in INCOMPATIBLE_POSITIONAL_SCORING],
        fused_scoring=FUSED_SCORING, fused_positional=FUSED_POSITIONAL, norm=NORM, tasks=TASKS,
        tokenizers=TOKENIZERS, spm_models=SPM_MODELS)
    return {**{key: list(values) for key, values in names.items()},
            "seq2seq_options": {f: dict(spec.options) for f, spec in SEQ2SEQ_MODELS.items()},
            "lm_options": {f: dict(spec.options) for f, spec in LM_MODELS.items()},
            "renamed": dict(RENAMED)}


# -- Tracking: where a run is logged besides its run store ---------------------------------------
TRACKING = table(
    Choice("none", "the run store only (always written)"),
    Choice("wandb", "and a W&B run (offline without a key)", "lit_attention.tracking.wandb:make_wandb_logger"),
)
NO_TRACKING = "none"   # the default

# The ATTENTION choice without attention: the configuration the report compares against by default.
NO_ATTENTION = "none"


def imported(path: str):
    """What "package.module:attribute" (the attribute possibly dotted) names, imported now."""
    module, _, attribute = path.partition(":")
    return attrgetter(attribute)(importlib.import_module(module))


def implementation(rows: Mapping[str, Choice], name: str):
    """What ``rows[name]`` implements it with (``imported``); None for a row without one."""
    return None if rows[name].impl is None else imported(rows[name].impl)


# -- Config keys whose value is a choice --------------------------------------------------------
# By kind of model ("seq2seq": TranslationModule + TranslationDataModule, "lm": LanguageModelModule
# + LMDataModule). The training CLI's types and checks, the sweep schema and `lit-attention
# choices` all validate against this table; tests/test_registry.py checks the CLI's types match it.
CONFIG_CHOICES = {
    "seq2seq": {
        "model.family": FAMILIES, "model.cell": tuple(CELLS), "model.attention": tuple(ATTENTION),
        "model.scoring": tuple(SCORING), "model.context": tuple(CONTEXT),
        "model.enc_output": tuple(ENC_OUTPUT), "model.positional": tuple(POSITIONAL),
        "model.norm": tuple(NORM),
        "data.task": tuple(TASKS), "data.tokenizer": tuple(TOKENIZERS), "data.spm_model": SPM_MODELS,
    },
    "lm": {
        "model.family": LM_FAMILIES, "model.cell": tuple(CELLS), "model.positional": tuple(POSITIONAL),
        "model.scoring": tuple(TRANSFORMER_SCORING), "model.norm": tuple(NORM),
        "model.smoothing": tuple(NGRAM_SMOOTHING),
        "data.task": tuple(TASKS), "data.tokenizer": tuple(TOKENIZERS), "data.spm_model": SPM_MODELS,
    },
}
KINDS = tuple(CONFIG_CHOICES)
# The choice a key takes when a config leaves it out: the defaults in the signatures of the
# LightningModules and data modules (read here, so no module spells a choice name).
CONFIG_DEFAULTS = {
    "seq2seq": {"model.family": "transformer", "data.task": "toy-mt", "data.tokenizer": "word",
                "data.spm_model": "unigram"},
    "lm": {"model.family": "transformer", "data.task": FILES_TASK, "data.tokenizer": "char",
           "data.spm_model": "unigram"},
}
# Keys a family narrows: (kind, family) -> key -> its valid values.
FAMILY_CHOICES = {("seq2seq", "transformer"): {"model.scoring": tuple(TRANSFORMER_SCORING)}}


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
