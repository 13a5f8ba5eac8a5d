"""The one registry: every choice is buildable, unknown ones fail with the valid list."""

import inspect
import itertools

import pytest
import torch
import torch.nn.functional as F

from lit_attention import registry
from lit_attention.data.vocab import BOS, EOS, PAD
from lit_attention.lightning.translation import TranslationModule
from lit_attention.models import build_seq2seq, count_parameters
from lit_attention.models.attention import MultiHeadAttention
from conftest import REPO
from seq2seq_training import train_on_batch


H = 16          # d_model of the models built below
SMALL = {"transformer": dict(d_model=H, heads=2, enc_layers=1, dec_layers=1, ffn=32),
         "rnn": dict(d_model=H, emb_size=H, enc_layers=1, dec_layers=1, rank=4)}


def _rnn_configs():
    """Every recurrent configuration the registry allows, with the options that act only:
    context without attention; scoring, enc_output and input feeding with it."""
    for cell, attention, bidirectional in itertools.product(registry.CELLS, registry.ATTENTION, (False, True)):
        if attention == "none":
            variants = [dict(context=context) for context in registry.CONTEXT]
        else:
            variants = [dict(scoring=scoring, enc_output=enc_output, input_feeding=feeding)
                        for scoring, enc_output, feeding in itertools.product(
                            registry.SCORING, registry.ENC_OUTPUT, (False, True))]
        for variant in variants:
            config = dict(family="rnn", cell=cell, attention=attention, bidirectional=bidirectional,
                          **variant)
            try:
                registry.resolve(registry.SEQ2SEQ_MODELS, "rnn", {**config, "family": None}, {"d_model": H})
            except ValueError:
                continue
            yield config


def _transformer_configs():
    for positional, scoring in registry.transformer_variants():
        yield dict(family="transformer", positional=positional, scoring=scoring)


def _name(config):
    return "-".join(str(v) for v in config.values())


def _build(config):
    torch.manual_seed(0)
    return build_seq2seq(src_vocab_size=11, tgt_vocab_size=11, **SMALL[config["family"]], **config)


def _shapes(net, leave_out=lambda name: False):
    return {n: tuple(p.shape) for n, p in net.named_parameters() if not leave_out(n)}


def _neighbours(configs, factor):
    """Pairs of configurations that differ in ``factor`` only."""
    groups = {}
    for config in configs:
        rest = tuple((k, v) for k, v in config.items() if k != factor)
        groups.setdefault(rest, []).append(config)
    for group in groups.values():
        yield from itertools.combinations(group, 2)


RNN_CONFIGS = list(_rnn_configs())


@pytest.mark.parametrize("choice", RNN_CONFIGS + list(_transformer_configs()), ids=_name)
def test_every_registered_combination_builds_through_the_factory(choice):
    assert count_parameters(_build(choice)) > 0


def test_the_registry_allows_every_scoring_with_some_encoder_output():
    for scoring in registry.SCORING:
        assert any(c.get("scoring") == scoring and c["bidirectional"] for c in RNN_CONFIGS)
    refused = dict(cell="gru", attention="luong", scoring="dot", bidirectional=True, enc_output="concat")
    with pytest.raises(ValueError, match="set model.enc_output 'sum' or 'project'"):
        registry.resolve(registry.SEQ2SEQ_MODELS, "rnn", refused, {"d_model": H})


def _scorer_parameters(config):
    """What the registry documents each recurrent scorer to own, Dq = H, Dk = size of the keys."""
    dq = H
    dk = 2 * H if config["bidirectional"] and config["enc_output"] == "concat" else H
    a, r = H, SMALL["rnn"]["rank"]
    return {"dot": 0, "scaled_dot": 0, "general": dq * dk, "low_rank": r * (dq + dk),
            "additive": a * (dq + dk + 1), "concat": a * (dq + dk + 1)}[config["scoring"]]


@pytest.mark.slow   # over 2 CPU seconds (2.2-4.3 s alone on 2 cores)
def test_rnn_scoring_arms_differ_in_the_scorer_only():
    """Over every allowed configuration: two arms that differ in scoring own the same parameters
    outside the scorer, and each scorer owns exactly what its formula has (dot: nothing)."""
    pairs = list(_neighbours([c for c in RNN_CONFIGS if c["attention"] != "none"], "scoring"))
    assert len(pairs) > 100
    outside = lambda name: name.startswith("scorer.")
    for a, b in pairs:
        net_a, net_b = _build(a), _build(b)
        assert _shapes(net_a, outside) == _shapes(net_b, outside), (a, b)
        for config, net in ((a, net_a), (b, net_b)):
            assert count_parameters(net.scorer) == _scorer_parameters(config), config
        if {a["scoring"], b["scoring"]} == {"dot", "general"}:
            dk = 2 * H if a["bidirectional"] and a["enc_output"] == "concat" else H
            assert abs(count_parameters(net_a) - count_parameters(net_b)) == H * dk


@pytest.mark.slow   # 1.6-2.1 CPU-s (the fast set's 2-minute target)
def test_input_feeding_arms_differ_in_the_decoder_input_only():
    pairs = list(_neighbours(RNN_CONFIGS, "input_feeding"))
    assert {a["attention"] for a, _ in pairs} == {"bahdanau", "luong"}
    for a, b in pairs:
        net_a, net_b = _build(a), _build(b)
        first_input = lambda name: name == "decoder.weight_ih_l0"
        assert _shapes(net_a, first_input) == _shapes(net_b, first_input)
        width = lambda net: net.decoder.weight_ih_l0.shape[1]
        assert abs(width(net_a) - width(net_b)) == net_a.out_size


@pytest.mark.slow   # 1.6-2.1 CPU-s (the fast set's 2-minute target)
def test_wiring_arms_differ_where_attention_enters_the_decoder_only():
    pairs = [(a, b) for a, b in _neighbours(RNN_CONFIGS, "attention")
             if {a["attention"], b["attention"]} == {"bahdanau", "luong"}]
    assert pairs
    where = lambda name: name == "decoder.weight_ih_l0" or name.startswith("readout.")
    for a, b in pairs:
        assert _shapes(_build(a), where) == _shapes(_build(b), where), (a, b)


def _mha_count(net):
    return sum(isinstance(m, MultiHeadAttention) for m in net.modules())


def test_transformer_scoring_arms_differ_in_the_scoring_parameters_only():
    """dot/scaled_dot own nothing beyond the projections every arm shares; general one d x d map
    per head (h d^2 per attention module); additive two maps and a vector (2 h d^2 + h d)."""
    heads, d = SMALL["transformer"]["heads"], H // SMALL["transformer"]["heads"]
    own = {"scaled_dot": 0, "dot": 0, "general": heads * d * d,
           "additive": 2 * heads * d * d + heads * d}
    scoring_parameter = lambda name: name.rsplit(".", 1)[-1] in ("w", "w_query", "w_key", "v")
    pairs = list(_neighbours(list(_transformer_configs()), "scoring"))
    assert len(pairs) > 20
    for a, b in pairs:
        net_a, net_b = _build(a), _build(b)
        assert _shapes(net_a, scoring_parameter) == _shapes(net_b, scoring_parameter)
        for config, net in ((a, net_a), (b, net_b)):
            extra = sum(p.numel() for n, p in net.named_parameters() if scoring_parameter(n))
            assert extra == _mha_count(net) * own[config["scoring"]], config


def test_transformer_positional_arms_differ_in_position_parameters_only():
    def positional_parameter(name):
        modules = name.split(".")[:-1]
        return bool({"position", "bias", "shaw"} & set(modules))
    for a, b in _neighbours(list(_transformer_configs()), "positional"):
        assert _shapes(_build(a), positional_parameter) == _shapes(_build(b), positional_parameter)


@pytest.mark.parametrize("field,value,valid", [("family", "cnn", "transformer"),
                                               ("scoring", "cosine", "additive"),
                                               ("cell", "mlstm", "elman-tanh")])
def test_unknown_choice_lists_the_valid_ones(field, value, valid):
    options = {"family": "rnn", "attention": "bahdanau", field: value}
    with pytest.raises(ValueError, match=valid):
        TranslationModule(**options)


def test_transformer_only_scoring_is_rejected_for_transformers():
    with pytest.raises(ValueError, match="scaled_dot"):
        TranslationModule(family="transformer", scoring="low_rank")


@pytest.mark.parametrize("family,options", [
    ("transformer", dict(d_model=64, heads=4, ffn=128)),
    ("rnn", dict(d_model=64, emb_size=64, cell="gru", attention="bahdanau"))])
def test_match_params_picks_the_width_closest_to_the_budget(family, options):
    from lit_attention.models import match_width
    from lit_attention.models.base import at_width
    target = 200_000
    build = lambda **o: build_seq2seq(family, 500, 500, enc_layers=2, dec_layers=2, **o)
    matched = match_width(build, options, target)
    width = matched["d_model"]
    assert matched == at_width(options, width) and width % 8 == 0
    sized = [k for k in ("emb_size", "ffn") if k in options]     # keep their ratio to d_model
    assert all(matched[k] * options["d_model"] == options[k] * width for k in sized)
    count = lambda w: count_parameters(build(**at_width(options, w)))
    best = count(width)
    assert abs(best - target) <= abs(count(width - 8) - target)
    assert abs(best - target) <= abs(count(width + 8) - target)
    assert abs(best - target) / target < 0.15


# -- the family tables: every name builds its class, every option exists where it is used ---------

KINDS = {"seq2seq": (registry.SEQ2SEQ_MODELS, registry.SEQ2SEQ_COMMON),
         "lm": (registry.LM_MODELS, ())}


def _model_classes(package) -> set[type]:
    """The nn.Module classes defined at the top level of every module of ``package``."""
    import importlib
    import inspect
    import pkgutil
    found = set()
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        found |= {c for _, c in inspect.getmembers(module, inspect.isclass)
                  if c.__module__ == module.__name__ and issubclass(c, torch.nn.Module)}
    return found


def test_every_family_name_builds_its_class_and_every_model_class_has_a_name():
    import lit_attention.models
    import lit_attention.models.lm
    from lit_attention.models import model_class
    from lit_attention.models.base import Seq2SeqModel
    seq2seq = {model_class(registry.SEQ2SEQ_MODELS, f) for f in registry.FAMILIES}
    lms = {model_class(registry.LM_MODELS, f) for f in registry.LM_FAMILIES}
    assert len(seq2seq) == len(registry.FAMILIES) and len(lms) == len(registry.LM_FAMILIES)
    defined = _model_classes(lit_attention.models)
    assert seq2seq == {c for c in defined if issubclass(c, Seq2SeqModel) and c is not Seq2SeqModel}
    assert lms == _model_classes(lit_attention.models.lm)


@pytest.mark.parametrize("kind", KINDS)
def test_every_option_group_field_is_a_module_argument_and_a_constructor_argument(kind):
    """Each family's options exist on the LightningModule (default None: the family's default)
    and, unless they shape training only, on the family's model constructor; the shared ones too."""
    import inspect
    from lit_attention.lightning.lm import LanguageModelModule
    from lit_attention.models import constructor_options, model_class
    families, common = KINDS[kind]
    module = TranslationModule if kind == "seq2seq" else LanguageModelModule
    params = inspect.signature(module.__init__).parameters
    for family, spec in families.items():
        takes = constructor_options(model_class(families, family))
        for option in (*common, *spec.options):
            assert option in params, (family, option)
            assert option in takes or option in registry.TRAINING_OPTIONS, (family, option)
        for option in spec.options:
            assert option in common or params[option].default is None, (family, option)
        assert set(spec.active_when) <= set(spec.options)
        assert all(other in spec.options for other, _ in spec.active_when.values())
        assert set(spec.moved.values()) <= set(spec.options)
    # an option some family has is None by default everywhere: set, it is never silently dropped
    for option in registry.family_options(families):
        assert option in common or params[option].default is None, option


def test_every_family_builds_from_its_defaults_and_records_what_acts():
    from lit_attention.lightning.lm import LanguageModelModule
    for family in registry.FAMILIES:
        module = TranslationModule(family=family, d_model=32, src_vocab_size=20, tgt_vocab_size=20)
        module.configure_model()
        model = module.describe()["model"]
        assert tuple(model) == registry.variant_fields(family, module.hparams)
        assert None not in model.values(), model
        others = set(registry.family_options(registry.SEQ2SEQ_MODELS)) - set(model) - set(registry.UNRECORDED_OPTIONS)
        assert all(module.hparams[k] is None for k in others), family
    for family in registry.LM_FAMILIES:
        module = LanguageModelModule(family=family, n_vocab=20)
        module.configure_model()
        model = module.describe()["model"]
        assert tuple(model) == registry.lm_variant_fields(family, module.hparams)
        assert None not in model.values(), model


def test_a_recorded_option_holds_the_resolved_value():
    rnn = TranslationModule(family="rnn", d_model=48, attention="none")
    model = rnn.describe()["model"]
    assert model["emb_size"] == 48 and model["context"] == "init" and model["cell"] == "lstm"
    assert "scoring" not in model and rnn.hparams.scoring is None and rnn.hparams.heads is None
    transformer = TranslationModule(family="transformer")
    assert transformer.hparams.scoring == "scaled_dot" and transformer.hparams.cell is None


def test_renamed_names_point_at_options_and_are_options_nowhere():
    import inspect
    from lit_attention.lightning.lm import LanguageModelModule
    from lit_attention.models import constructor_options, model_class
    everywhere = set()
    for families, common in KINDS.values():
        everywhere |= set(common) | set(registry.family_options(families))
        everywhere |= {o for f in families for o in constructor_options(model_class(families, f))}
    for module in (TranslationModule, LanguageModelModule):
        everywhere |= set(inspect.signature(module.__init__).parameters)
    assert set(registry.RENAMED.values()) <= everywhere
    assert not set(registry.RENAMED) & everywhere


def test_the_config_doc_lists_every_family_option_with_its_default():
    """docs/CONFIG.md's table of families is the registry's (this test names a missing row)."""
    text = (REPO / "docs" / "CONFIG.md").read_text()
    for kind, (families, common) in KINDS.items():
        for family, spec in families.items():
            row = config_doc_row(kind, family, spec)
            assert row in text, f"docs/CONFIG.md lacks (or has another) row: {row}"
    for old, new in registry.RENAMED.items():
        assert f"| `{old}` | `{new}` |" in text
    shared = " ".join(text[text.index("Every encoder-decoder (`TranslationModule`) also uses"):].split()[:30])
    for option, default in registry.SEQ2SEQ_COMMON.items():
        assert f"`{option}` ({default})" in shared, f"docs/CONFIG.md lacks `{option}` ({default})"


def config_doc_row(kind, family, spec) -> str:
    def value(k, v):
        return f"(= {registry.DERIVED[k]})" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
    options = ", ".join(f"`{k}` {value(k, v)}" for k, v in spec.options.items())
    return f"| {kind} | `{family}` | {options} |"


def test_choices_cover_the_issue_lists():
    data = registry.as_dict()
    assert data["seq2seq_options"]["rnn"]["cell"] == "lstm" and data["renamed"]["d_embed"] == "emb_size"
    assert list(data["lm_options"]) == list(registry.LM_FAMILIES)
    assert len(data["scoring"]) == 6 and len(data["positional"]) == 7
    assert {"copy", "reverse", "sort", "toy-mt"} <= set(data["tasks"])


def _reverse_pairs(n=8, vocab=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    src, tgt_in, tgt_out = (torch.full((n, 7), PAD) for _ in range(3))
    for b in range(n):
        m = 4 + b % 3
        x = torch.randint(4, vocab, (m,), generator=g)
        src[b, :m], src[b, m] = x, EOS
        tgt_in[b, 0], tgt_in[b, 1:m + 1] = BOS, x.flip(0)
        tgt_out[b, :m], tgt_out[b, m] = x.flip(0), EOS
    return src, tgt_in, tgt_out


def _family_scoring_positional():
    """family x scoring x positional, within what is valid (the issue's ablation grid)."""
    yield from _transformer_configs()
    yield dict(family="rnn", cell="lstm", attention="none")
    for attention in ("bahdanau", "luong"):
        for scoring in registry.SCORING:
            yield dict(family="rnn", cell="lstm", attention=attention, scoring=scoring,
                       enc_output="project")


@pytest.mark.slow
@pytest.mark.parametrize("choice", list(_family_scoring_positional()), ids=lambda c: "-".join(c.values()))
def test_every_combination_overfits_a_batch_of_8_pairs(choice):
    torch.manual_seed(0)
    sizes = {"transformer": dict(heads=2, ffn=64), "rnn": dict(emb_size=32, rank=8)}[choice["family"]]
    net = build_seq2seq(src_vocab_size=12, tgt_vocab_size=12, d_model=32, enc_layers=1, dec_layers=1,
                        dropout=0.0, **sizes, **choice)
    first, last = train_on_batch(net, *_reverse_pairs(), steps=200, lr=5e-3, until=0.5)
    assert last < 0.5 < first, (first, last)


# -- the config-key table every validator reads ---------------------------------------------------

def _choice_params(cls) -> dict[str, tuple]:
    """Constructor parameter -> the values of its Literal type, for every Literal-typed parameter."""
    import typing
    found = {}
    for name, hint in typing.get_type_hints(cls.__init__).items():
        for arg in (hint, *typing.get_args(hint)):   # Literal[...] or Optional[Literal[...]]
            if typing.get_origin(arg) is typing.Literal:
                found[name] = typing.get_args(arg)
    return found


def test_the_cli_types_are_the_registry_config_choices():
    """What the training CLI accepts for a choice key (the Literal types jsonargparse checks) is
    exactly registry.CONFIG_CHOICES, and every Literal-typed key is in the table (so the sweep
    schema and `lit-attention choices` know it)."""
    from lit_attention.data.lm import LMDataModule
    from lit_attention.data.translation import TranslationDataModule
    from lit_attention.lightning.lm import LanguageModelModule

    classes = {"seq2seq": {"model": TranslationModule, "data": TranslationDataModule},
               "lm": {"model": LanguageModelModule, "data": LMDataModule}}
    for kind, groups in classes.items():
        typed = {f"{group}.{name}": values for group, cls in groups.items()
                 for name, values in _choice_params(cls).items()}
        assert typed == registry.CONFIG_CHOICES[kind], kind


def _choice_tables() -> dict[str, dict]:
    return {name: value for name, value in vars(registry).items()
            if isinstance(value, dict) and value and all(isinstance(v, registry.Choice) for v in value.values())}


def test_every_choice_row_names_an_implementation_that_exists():
    """Each row's "module:attribute" imports (a typo fails here, not when a run picks the choice)."""
    tables = _choice_tables()
    assert {"CELLS", "ATTENTION", "CONTEXT", "SCORING", "ENC_OUTPUT", "TRANSFORMER_SCORING", "POSITIONAL",
            "NORM", "NGRAM_SMOOTHING", "TASKS", "TOKENIZERS", "TRACKING"} <= set(tables)
    for table_name, rows in tables.items():
        for name, row in rows.items():
            assert row.name == name
            assert row.impl is None or registry.implementation(rows, name) is not None, (table_name, name)
    assert {n for n, row in registry.TASKS.items() if row.impl is None} == {registry.FILES_TASK}
    assert registry.NO_ATTENTION in registry.ATTENTION and registry.NO_TRACKING in registry.TRACKING
    assert registry.implementation(registry.TRACKING, registry.NO_TRACKING) is None


def test_every_row_of_a_table_has_the_same_properties():
    with pytest.raises(TypeError, match="different properties"):
        registry.table(registry.Choice("a", "one", fused=True), registry.Choice("b", "two"))
    for rows in _choice_tables().values():
        assert len({tuple(sorted(row.properties)) for row in rows.values()}) == 1


def test_a_family_narrows_its_choices():
    assert registry.config_choices("model.scoring", "seq2seq") == tuple(registry.SCORING)
    assert registry.config_choices("model.scoring", "seq2seq", ["transformer"]) == tuple(registry.TRANSFORMER_SCORING)
    assert registry.config_choices("model.scoring", "seq2seq", ["rnn", "transformer"]) == tuple(registry.SCORING)
    assert registry.config_choices("model.lr", "seq2seq") is None
    with pytest.raises(ValueError, match="unknown data.task 'cpy'; valid choices: copy, reverse"):
        registry.check_config("lm", "data", task="cpy")


# -- a choice is one row: the registry's defaults are the only ones, a new choice is a row and a class

def test_model_constructors_have_no_defaults_of_their_own():
    """Unset options take the registry's defaults (registry.defaults), never a constructor's."""
    from lit_attention.models import model_class
    for families in (registry.SEQ2SEQ_MODELS, registry.LM_MODELS):
        for family in families:
            params = inspect.signature(model_class(families, family).__init__).parameters
            assert [n for n, p in params.items() if p.default is not p.empty] == [], family


def test_a_model_built_with_options_left_out_has_the_registry_defaults():
    """The rnn family ties its embeddings by default (the registry says so; its constructor once
    said otherwise), and an encoder-decoder's depth is SEQ2SEQ_COMMON's."""
    net = build_seq2seq("rnn", 11, 11, d_model=16)
    assert net.generator.weight is net.tgt_embed.weight
    assert net.encoder.rnn.num_layers == registry.SEQ2SEQ_COMMON["enc_layers"]
    assert net.decoder.num_layers == registry.SEQ2SEQ_COMMON["dec_layers"]
    transformer = build_seq2seq("transformer", 11, 11, d_model=16, positional="t5_bias", heads=2, ffn=16)
    assert transformer.encoder.bias.buckets == registry.POSITIONAL_OPTIONS["rel_buckets"]


from lit_attention.models.scoring import Scorer   # noqa: E402  (the toy scorer below subclasses it)


class Cosine(Scorer):
    """A toy scoring function for the test below: a learned scale times cos(s, h)."""

    def __init__(self, query_size: int, key_size: int, attn_size: int):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(5.0))

    def score(self, query, prepared):
        return self.scale * F.normalize(query, dim=-1) @ F.normalize(prepared, dim=-1).transpose(1, 2)


@pytest.fixture
def cosine_scoring(monkeypatch):
    """A scoring function added the way the registry asks: one row (and the class above)."""
    monkeypatch.setitem(registry.SCORING, "cosine", registry.Choice(
        "cosine", "scale * cos(s, h)", f"{Cosine.__module__}:Cosine", parameter_free=True, options=()))
    return "cosine"


def test_a_new_scoring_function_is_one_row_and_one_class(cosine_scoring):
    """Nothing else is edited: the factory builds it, the registry checks how it combines (keys of
    the decoder's size, as its row says), the LightningModule resolves and records it, it trains."""
    torch.manual_seed(0)
    options = dict(d_model=32, emb_size=32, enc_layers=1, dec_layers=1, dropout=0.0,
                   attention="luong", scoring=cosine_scoring)
    with pytest.raises(ValueError, match="has no parameters"):
        build_seq2seq("rnn", 12, 12, **options, enc_output="concat")
    net = build_seq2seq("rnn", 12, 12, **options, enc_output="sum")
    assert type(net.scorer) is Cosine
    first, last = train_on_batch(net, *_reverse_pairs(), steps=60, lr=1e-2)
    assert last < first / 2, (first, last)
    module = TranslationModule(family="rnn", scoring=cosine_scoring, attention="luong", enc_output="sum",
                               d_model=16, src_vocab_size=12, tgt_vocab_size=12)
    module.configure_model()
    assert type(module.net.scorer) is Cosine and module.describe()["model"]["scoring"] == "cosine"


class DistanceBias(torch.nn.Module):
    """A toy positional encoding for the test below: a learned per-head slope times -|i - j|."""

    def __init__(self, heads: int, causal: bool):
        super().__init__()
        self.slopes = torch.nn.Parameter(torch.ones(heads))

    def forward(self, q_pos, k_pos):
        return -self.slopes[:, None, None] * (k_pos[None, :] - q_pos[:, None]).abs().float()


@pytest.fixture
def distance_positional(monkeypatch):
    """A positional encoding added the way the registry asks: one row (and the class above)."""
    monkeypatch.setitem(registry.POSITIONAL, "distance", registry.Choice(
        "distance", "learned slope per head times -|i - j|", f"{DistanceBias.__module__}:DistanceBias",
        acts_on="bias", relative=True, fused=True, options=()))
    return "distance"


def test_a_new_positional_encoding_is_one_row_and_one_class(distance_positional):
    torch.manual_seed(0)
    net = build_seq2seq("transformer", 12, 12, d_model=32, heads=2, ffn=64, enc_layers=1, dec_layers=1,
                        dropout=0.0, positional=distance_positional)
    assert type(net.encoder.bias) is DistanceBias and type(net.decoder.bias) is DistanceBias
    assert net.src_embed.position is None                  # a bias acts in self-attention only
    first, last = train_on_batch(net, *_reverse_pairs(), steps=30, lr=5e-3)
    assert last < first / 2, (first, last)
    assert net.encoder.bias.slopes.grad is not None
