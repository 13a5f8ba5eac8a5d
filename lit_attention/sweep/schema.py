"""Sweep files: load a YAML sweep safely and validate it, with errors that name the file and key.

A sweep file looks like::

    study_name: demo
    base: ../configs/toy-mt.yaml          # training config every trial starts from (or a mapping)
    objective: {metric: val_bleu, direction: maximize}
    sampler: grid                         # grid | random | tpe | bruteforce (or {name: tpe, seed: 0})
    pruner: none                          # none | median | hyperband (or {name: median, n_startup_trials: 2})
    seeds: 2                              # or an explicit list [1, 7]
    fixed: {trainer.max_epochs: 3}        # passed to every trial
    space:
      model.family: {choices: [rnn, transformer]}
      model.attention: {choices: [none, luong], when: {model.family: rnn}}
      model.scoring: {choices: [dot, additive], when: {model.attention: {not: none}}}
      model.lr: {low: 1.0e-4, high: 1.0e-2, log: true}

Instead of one `base`, the space may vary the training config itself: ``base: {choices: [a.yaml,
b.yaml]}`` (paths relative to the sweep file); each choice is named by its file's stem
(``multi30k-transformer``), which is the parameter's value in the study, the progress output and
the run's tags (``base:multi30k-transformer``).

Every value of a config key whose values are registry choices (family, cell, attention, scoring,
positional, task, ...) is checked against `registry.CONFIG_CHOICES`, and so is `tracking`.
Samplers, pruners and their options are the sweep's own vocabulary (Optuna's), listed here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import reprlib
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from lit_attention import metric_facts, registry
from lit_attention.config_check import SEED_RANGE, suggest
from lit_attention.files import FileError, read_yaml
from lit_attention.sweep.space import Condition, Param, count, probe_grid
from lit_attention.tracking.identity import sha256
from lit_attention.tracking.schema import SAFE_NAME, config_name

DIRECTIONS = ("minimize", "maximize")
PREFIXES = ("model.", "data.", "trainer.", "budget.")

BASE_PARAM = "base"    # the space parameter whose choices are training config files
# Each pruner and sampler with its integer options and the range each takes: (least, greatest or
# None). Optuna refuses some values only once the study opens (a median interval of 0, a seed of -1)
# and takes others it cannot act on (a Hyperband reduction factor of 1); an option a sampler does
# not read (grid enqueues every cell, so nothing is sampled) is refused as unknown.
PRUNER_OPTIONS = {
    "none": {},
    "median": {"n_startup_trials": (0, None), "n_warmup_steps": (0, None), "interval_steps": (1, None),
               "n_min_trials": (1, None)},
    "hyperband": {"min_resource": (1, None), "max_resource": (1, None), "reduction_factor": (2, None)},
}
SAMPLER_OPTIONS = {
    "grid": {},
    "random": {"seed": SEED_RANGE},
    "tpe": {"seed": SEED_RANGE, "n_startup_trials": (0, None)},
    "bruteforce": {"seed": SEED_RANGE},   # the order of the cells
}
MAX_CELLS = 10_000     # configurations x seeds a grid may have (`lit-attention sweep --max-cells`)


def options_help(options: dict) -> str:
    """'median: n_startup_trials >= 0, ...; hyperband: ...' (the named kinds that take options)."""
    return "; ".join(f"{name}: " + ", ".join(f"{o} {lo}..{hi}" if hi is not None else f"{o} >= {lo}"
                                             for o, (lo, hi) in opts.items())
                     for name, opts in options.items() if opts)


# A malformed sweep file: the message names the file, the line (when known) and the key.
SweepError = FileError


def sweep_key(name: str, help: str, default: Any = MISSING, *, shown: str | None = None,
              flag: str | None = None) -> Any:
    """The field that the sweep file's key ``name`` sets (dotted for a key inside a mapping:
    ``heartbeat.interval``): its value when the file omits it (``default``; none: the key is
    required), its row of docs/SWEEPS.md (``help``, and ``shown``: the default as that row says it,
    when it is not a value one writes), and the `lit-attention sweep` option that overrides it."""
    metadata = {"key": name, "help": help, "shown": shown, "flag": flag}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: json.loads(json.dumps(default)), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(kw_only=True)
class Sweep:
    """A validated sweep file. Each key of the file is one field declared with `sweep_key` (in the
    order of docs/SWEEPS.md's table); the other fields are filled while parsing."""
    path: Path
    study_name: str = sweep_key("study_name", "name of the study (and of the run-store group)")
    description: str = sweep_key("description", "free text about the study, for the reader of the file", "")
    base: Path | dict | None = sweep_key(
        "base", "training config every trial starts from: a path (relative to the sweep file) or a "
                "mapping; or none, when `space` has a `base` parameter (below)",
        None, shown="(required, or a `base` parameter in `space`)")
    kind: str = sweep_key(
        "kind", f"{' or '.join(f'`{k}`' for k in registry.KINDS)}: which registry lists `model.family` "
                "is checked against", "seq2seq")
    objective: str = sweep_key(
        "objective.metric", "the metric to optimise, e.g. `val_bleu`: any metric in "
                            "`summary.json`/`metrics.csv`; a trial that finishes without it stops the sweep "
                            "(exit 2), as no other would log it")
    direction: str = sweep_key(
        "objective.direction", " or ".join(f"`{d}`" for d in DIRECTIONS) + "; for a metric whose better "
        "side is known (" + ", ".join(f"{m.name} {'higher' if m.higher_is_better else 'lower'}"
                                      for m in metric_facts.METRICS.values()) + ") the direction that improves it")
    sampler: str = sweep_key(
        "sampler", f"{', '.join(f'`{s}`' for s in SAMPLER_OPTIONS)}; or "
                   "`{name: tpe, seed: 0, n_startup_trials: 10}` "
                   f"({options_help(SAMPLER_OPTIONS)}; grid enqueues every cell and takes none)", "grid")
    sampler_options: dict = field(default_factory=dict)   # of `sampler` written as a mapping
    pruner: str = sweep_key(
        "pruner", f"{', '.join(f'`{p}`' for p in PRUNER_OPTIONS)} (`none`: NopPruner); or "
                  "`{name: median, n_startup_trials: 5, n_warmup_steps: 2}` "
                  f"({options_help(PRUNER_OPTIONS)}; min_resource <= max_resource)", "none")
    pruner_options: dict = field(default_factory=dict)    # of `pruner` written as a mapping
    seeds: list[int] = sweep_key(
        "seeds", "`N` (seeds 0..N-1) or a list; each configuration runs once per seed (the trial attribute `seed`)", [0], shown="`1`")
    n_trials: int | None = sweep_key(
        "n_trials", "random/TPE: total trials (a multiple of the number of seeds); grid: optional cap",
        None, shown="(every cell; required with random/TPE)")
    storage: str | None = sweep_key("storage", "study database URL", None, flag="--storage",
                                    shown="`sqlite:///<root>/<study>/study.db`")
    root: Path = sweep_key("root", "run-store root", Path("runs"), flag="--root")
    fixed: dict = sweep_key(
        "fixed", "dotted config keys (`model.`, `data.`, `trainer.`, `budget.`) given to every trial, e.g. "
                 "`trainer.max_epochs: 6` or `budget.flops: 1.77e+14`", {})
    space: list[Param] = sweep_key("space", "the parameters (below)")
    heartbeat_interval: int = sweep_key(
        "heartbeat.interval", "seconds between two heartbeats of a worker for its running trial", 10)
    grace_period: int = sweep_key(
        "heartbeat.grace_period", "seconds without a heartbeat after which another worker fails the trial "
                                  "and re-queues its cell", 30, shown="3 × interval")
    max_retry: int = sweep_key("heartbeat.max_retry", "re-runs of a cell whose worker died", 2)
    tracking: str = sweep_key(
        "tracking", f"{' or '.join(f'`{t}`' for t in registry.TRACKING)}: where each trial is logged besides "
                    "its run store, one W&B run per trial with `wandb`", registry.NO_TRACKING, flag="--tracking")
    workers: int = sweep_key("workers", "trials in flight on this machine, one worker process each", 1,
                             flag="--workers")
    lines: dict = field(default_factory=dict, repr=False)  # line of each key in the file
    bases: dict[str, Path] = field(default_factory=dict)   # space `base`: file stem -> config file
    base_files: dict[str, str] = field(default_factory=dict, repr=False)   # stem -> path as written

    def with_overrides(self, **values: Any) -> Sweep:
        """This sweep with the keys that `lit-attention sweep` options override set to the options'
        values (``workers=4``); None: the option was not given, the file's value stays."""
        if set(values) - set(OVERRIDES):
            raise TypeError(f"no option overrides {sorted(set(values) - set(OVERRIDES))}; only {OVERRIDES}")
        return dataclasses.replace(self, **{name: v for name, v in values.items() if v is not None})

    def base_for(self, params: dict) -> Path | dict:
        """The training config a trial with these parameters starts from."""
        return self.bases[params[BASE_PARAM]] if BASE_PARAM in params else self.base

    @property
    def enumerated(self) -> bool:
        """Grid and brute force enumerate every cell up front; random and TPE sample."""
        return self.sampler in ("grid", "bruteforce")

    def spec(self) -> dict:
        """What defines the study (stored in it; a study of the same name must match)."""
        spec = {k: v for k, v in dataclasses.asdict(self).items() if k in (
            "objective", "direction", "sampler", "sampler_options", "pruner", "pruner_options",
            "seeds", "n_trials", "space", "fixed", "kind")}
        # "bases" only with base choices: the studies of sweeps with one base keep their hash
        return spec | ({"bases": self.base_files} if self.base_files else {})

    def spec_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.spec(), sort_keys=True).encode()).hexdigest()[:16]

    def design(self) -> dict:
        """What every trial starts from, beside ``spec()``: the inline base mapping, or the SHA-256
        of each base config file's text (stored in the study apart from the spec, so that studies
        created before it was recorded keep their spec hash)."""
        base = (json.loads(json.dumps(self.base, sort_keys=True, default=str))
                if isinstance(self.base, dict) else self.base and {"file_sha256": sha256(self.base)})
        return {"base": base, "bases": {stem: sha256(p) for stem, p in sorted(self.bases.items())}}


FIELDS = {f.metadata["key"]: f for f in dataclasses.fields(Sweep) if "key" in f.metadata}  # key -> field
TOP_KEYS = tuple(dict.fromkeys(k.partition(".")[0] for k in FIELDS))
REQUIRED = tuple(dict.fromkeys(k.partition(".")[0] for k, f in FIELDS.items()
                               if f.default is MISSING and f.default_factory is MISSING))
OVERRIDES = tuple(f.name for f in FIELDS.values() if f.metadata["flag"])   # = the options' argparse dests


def default(key: str) -> Any:
    """The value of a sweep key the file omits."""
    f = FIELDS[key]
    return f.default_factory() if f.default_factory is not MISSING else f.default


def inner_keys(key: str) -> list[str]:
    """The keys of a mapping key (`heartbeat` -> interval, grace_period, max_retry)."""
    return [k.partition(".")[2] for k in FIELDS if k.startswith(f"{key}.")]


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix: value}
    return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()} or {prefix: {}}


def design_changes(old: dict, new: dict) -> str:
    """What differs between two ``Sweep.design()``s, in words (at most five differences)."""
    if old.get("base") != new.get("base"):
        before, after = old.get("base") or {}, new.get("base") or {}
        if "file_sha256" in before or "file_sha256" in after:
            return "the base config's text changed"
        flat_old, flat_new = _flat(before), _flat(after)
        words = [f"{k.rstrip('.')} {a!r} -> {b!r}" for k in {**flat_old, **flat_new}
                 if (a := flat_old.get(k, "unset")) != (b := flat_new.get(k, "unset"))]
        return "base " + ", ".join(words[:5]) + (f" and {len(words) - 5} more" if len(words) > 5 else "")
    changed = set(old.get("bases", {}).items()) ^ set(new.get("bases", {}).items())
    return "the text of base choice(s) " + ", ".join(sorted({stem for stem, _ in changed})) + " changed"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Checker:
    def __init__(self, file: Path, lines: dict[str, int] | None = None):
        self.file = file
        self.lines = lines or {}

    def fail(self, key: str, message: str):
        """Raise SweepError at the line of ``key`` in the file, or of its closest enclosing key."""
        line = key
        while line and line not in self.lines:
            line = line.rpartition(".")[0]
        raise SweepError(self.file, key, message, self.lines.get(line))

    def number(self, key: str, value: Any) -> float:
        if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value):
            self.fail(key, f"must be a finite number, got {value!r}")
        return value

    def choice(self, key: str, value: Any, valid: tuple) -> str:
        if value not in valid:
            self.fail(key, f"unknown value {value!r}; valid: {', '.join(map(str, valid))}")
        return value

    def int(self, key: str, value: Any, minimum: int, maximum: int | None = None) -> int:
        if not _is_int(value):
            self.fail(key, f"must be an integer, got {type(value).__name__} {value!r}")
        if not minimum <= value <= (math.inf if maximum is None else maximum):
            self.fail(key, f"must be >= {minimum}, got {value}" if value < minimum
                      else f"must be <= {maximum}, got {value}")
        return value

    def mapping(self, key: str, value: Any, valid: Any = None, what: str = "key") -> dict:
        """``value``, which must be a mapping (of keys in ``valid``, when given: any other is an
        unknown ``what``, with the nearest valid key or the valid keys)."""
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping, got {type(value).__name__}")
        for k in value:
            if valid is not None and k not in valid:
                near = suggest(str(k).rpartition(".")[2], list(valid))
                hint = f" — did you mean {near}?" if near else f"; valid: {', '.join(valid) or 'none'}"
                self.fail(f"{key}.{k}" if key else str(k), f"unknown {what}{hint}")
        return value

    def named(self, key: str, value: Any, options: dict) -> tuple[str, dict]:
        """`name` or `{name: ..., option: ...}` (sampler, pruner)."""
        value = dict(self.mapping(key, {"name": value} if isinstance(value, str) else value))
        name = self.choice(f"{key}.name", value.pop("name", None), tuple(options))
        for opt, v in self.mapping(key, value, options[name], f"option for {name}").items():
            self.int(f"{key}.{opt}", v, *options[name][opt])
        if value.get("min_resource", 1) > value.get("max_resource", math.inf):
            self.fail(f"{key}.max_resource", f"must be >= min_resource ({value['min_resource']})")
        return name, value


def _parse_condition(ck: _Checker, key: str, ref: str, spec: Any, declared: dict[str, Param]) -> Condition:
    if ref not in declared:
        ck.fail(key, f"condition refers to {ref!r}, which is not declared earlier in the space")
    negate = isinstance(spec, dict)
    if negate:
        if set(spec) != {"not"}:
            ck.fail(key, "a condition is a value, a list of values, or {not: value(s)}")
        spec = spec["not"]
    values = tuple(spec) if isinstance(spec, list) else (spec,)
    if not values:
        ck.fail(key, "empty list of values")
    for v in values:
        if not declared[ref].can_take(v):
            ck.fail(key, f"{v!r} is not a possible value of {ref}")
    return Condition(ref, values, negate)


def _parse_choices(ck: _Checker, key: str, choices: Any) -> list:
    """The choices of a parameter (of the `base` parameter too): a non-empty list."""
    if not isinstance(choices, list) or not choices:
        ck.fail(f"{key}.choices", f"must be a non-empty list, got {reprlib.repr(choices)}")
    return choices


def _parse_param(ck: _Checker, name: str, spec: Any, declared: dict[str, Param], kind: str) -> Param:
    key = f"space.{name}"
    if not isinstance(name, str) or not name.startswith(PREFIXES) or not config_name(name).rpartition(".")[2]:
        ck.fail(key, f"parameter names are dotted config keys starting with {', '.join(PREFIXES)} "
                     f"(or `{BASE_PARAM}`: a list of training configs)")
    spec = dict(ck.mapping(key, spec, ("choices", "low", "high", "log", "step", "type", "when")))
    conditions = tuple(_parse_condition(ck, f"{key}.when.{ref}", ref, v, declared)
                       for ref, v in ck.mapping(f"{key}.when", spec.pop("when", {})).items())
    if "choices" in spec:
        if len(spec) > 1:
            ck.fail(f"{key}.{sorted(set(spec) - {'choices'})[0]}", "unknown key next to choices")
        choices = _parse_choices(ck, key, spec["choices"])
        # no two choices a config reads as one value: 1 and 1.0, "1e-3" (YAML reads it as text)
        # and 0.001, "a" and "a" (a boolean is never a number): a configuration would run twice
        seen: dict[tuple, int] = {}
        for i, c in enumerate(choices):
            finite = not isinstance(c, float) or math.isfinite(c)
            if not finite or not isinstance(c, (int, float, str, type(None))):
                ck.fail(f"{key}.choices", f"choices are finite scalars (str, int, float, bool), "
                                          f"got {c!r}")
            same = (isinstance(c, bool), c)
            if isinstance(c, str):
                with contextlib.suppress(ValueError):
                    same = (False, float(c))
            if (j := seen.get(same)) is not None:
                ck.fail(f"{key}.choices",
                        f"choices {j + 1} and {i + 1} ({reprlib.repr(choices[j])} and "
                        f"{reprlib.repr(c)}) are one value: a configuration would run twice, "
                        "its runs counted as seeds")
            seen[same] = i
        # a condition naming the families narrows the choices (Transformer scoring functions)
        families = next((c.values for c in conditions
                         if config_name(c.name) == "model.family" and not c.negate), None)
        if (valid := registry.config_choices(config_name(name), kind, families)) is not None:
            for c in choices:
                ck.choice(f"{key}.choices", c, valid)
        return Param(name, choices=tuple(choices), when=conditions)
    if "low" not in spec or "high" not in spec:
        ck.fail(key, "needs choices, or low and high")
    low, high = (ck.number(f"{key}.{k}", spec[k]) for k in ("low", "high"))
    if low >= high:
        ck.fail(f"{key}.high", f"must be greater than low ({low})")
    ints = _is_int(low) and _is_int(high)
    if "type" not in spec and ints and not _is_int(spec.get("step", 1)):
        ck.fail(f"{key}.step", f"a float step ({spec['step']!r}) between integer bounds: write the bounds "
                               "as floats (1.0) for a float parameter, or an integer step")
    typ = ck.choice(f"{key}.type", spec.get("type", "int" if ints else "float"), ("int", "float"))
    log, step = spec.get("log", False), spec.get("step")
    if not isinstance(log, bool):
        ck.fail(f"{key}.log", "must be true or false")
    if step is not None and (ck.number(f"{key}.step", step) <= 0):
        ck.fail(f"{key}.step", "must be a positive number")
    if log and step is not None:
        ck.fail(f"{key}.step", "log and step cannot be combined")
    if log and low <= 0:
        ck.fail(f"{key}.low", "must be > 0 with log: true")
    for k, v in (("low", low), ("high", high), ("step", 1 if step is None else step)):
        if typ == "int" and not _is_int(v):
            ck.fail(f"{key}.{k}", f"must be an integer for an int parameter, got {v!r}")
    return Param(name, low=low, high=high, log=log, step=step, type=typ, when=conditions)


def _check_cells(ck: _Checker, sweep: Sweep, base_families: dict[str, str | None]) -> None:
    """Per-configuration registry checks the per-key checks cannot see (scoring x family; the
    family a base choice's file sets).

    Run on the probe space (ranges reduced to a few values), never on a grid of unknown size.
    """
    cells = probe_grid(sweep.space, MAX_CELLS)
    for cell in cells:
        keys: dict[str, str] = {}
        for name in cell:
            if config_name(name) in keys:
                ck.fail(f"space.{name}", f"active together with space.{keys[config_name(name)]} "
                                         "(both set the same config key); make their conditions exclusive")
            keys[config_name(name)] = name
        from_base = base_families.get(cell.get(BASE_PARAM))
        values = {**({"model.family": from_base} if from_base else {}), **sweep.fixed,
                  **{config_name(k): v for k, v in cell.items() if k != BASE_PARAM}}
        family = values.get("model.family")
        if family is None:
            continue
        whose = (f" (the family of base choice {cell[BASE_PARAM]!r})"
                 if from_base and "model.family" not in keys and "model.family" not in sweep.fixed else "")
        for name, value in values.items():
            valid = registry.config_choices(name, sweep.kind, [family])
            if valid is not None and value not in valid:
                key = f"space.{keys[name]}" if name in keys else f"fixed.{name}"
                ck.fail(key, f"{value!r} is not a {name} of model.family {family!r}{whose} (valid: "
                             f"{', '.join(valid)}); add a `when: {{model.family: ...}}` condition")
    sampled = {name for cell in cells for name in cell}   # active in some configuration
    for p in sweep.space:   # (the probe grid holds every value a condition tests: it is exact here)
        if cells and p.name not in sampled:
            holds = " and ".join(f"{c.name} {'not ' if c.negate else ''}in {list(c.values)}" for c in p.when)
            ck.fail(f"space.{p.name}.when", f"these conditions never hold together ({holds}): the "
                                            f"parameter would never be sampled; change or remove them")


def _find_config(ck: _Checker, key: str, value: str, path: Path) -> Path:
    """A training config named in the sweep file: relative to the sweep file, else to the working directory."""
    found = next((c for c in (path.parent / value, Path(value)) if c.is_file()), None)
    if found is None:
        ck.fail(key, f"training config {value!r} not found (relative to {path.parent} or the working directory)")
    return found.resolve()


def _parse_bases(ck: _Checker, spec: Any, path: Path, kind: str) -> tuple[Param, dict, dict, dict]:
    """The `base` space parameter: (param whose choices are the files' stems, stem -> file,
    stem -> path as written, stem -> the model.family the file sets or None)."""
    key = f"space.{BASE_PARAM}"
    for k in ck.mapping(key, spec):
        if k != "choices":
            ck.fail(f"{key}.{k}", "a base parameter takes only `choices`, a list of training config files "
                                  "(every trial needs a config, so it has no `when`)")
    files, written, families = {}, {}, {}
    for i, choice in enumerate(_parse_choices(ck, key, spec.get("choices"))):
        where = f"{key}.choices[{i}]"
        if not isinstance(choice, str) or not choice:
            ck.fail(where, f"must be the path of a training config, got {choice!r}")
        file = _find_config(ck, where, choice, path)
        stem = file.stem
        if not SAFE_NAME.fullmatch(stem):
            ck.fail(where, f"{choice!r}: the file's stem {stem!r} names the choice, so it must be 1-128 "
                           "letters, digits, '.', '_' or '-', starting with a letter or digit")
        if stem in files:
            ck.fail(where, f"{choice!r} has the same stem as {written[stem]!r}; the stem names the choice "
                           "in the study and the runs: rename one file")
        try:
            config, _ = read_yaml(file)
        except FileError as e:
            ck.fail(where, f"{choice!r}: {e}")
        model = config.get("model")
        init = model.get("init_args") if isinstance(model, dict) else None
        family = init.get("family") if isinstance(init, dict) else None
        valid = registry.config_choices("model.family", kind)
        if family is not None and family not in valid:
            ck.fail(where, f"{choice!r} ({file}): model.family {family!r} is not a family of kind "
                           f"{kind!r} (valid: {', '.join(valid)}); set the sweep's `kind`")
        files[stem], written[stem], families[stem] = file, choice, family
    return Param(BASE_PARAM, choices=tuple(files)), files, written, families


def parse_sweep(data: Any, path: Path | str, lines: dict[str, int] | None = None,
                max_cells: int = MAX_CELLS) -> Sweep:
    path = Path(path)
    ck = _Checker(path, lines)
    ck.mapping("", data, TOP_KEYS)   # "": the file's top level
    for k in REQUIRED:
        if k not in data:
            ck.fail(k, "missing (required)")

    name = data["study_name"]
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):   # it names the runs' group directory
        ck.fail("study_name", "must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit")
    def given(key: str) -> Any:
        return data[key] if key in data else default(key)

    kind = ck.choice("kind", given("kind"), registry.KINDS)

    space_data = ck.mapping("space", data["space"])
    if BASE_PARAM in space_data and "base" in data:
        ck.fail(f"space.{BASE_PARAM}", "the sweep also has a top-level base: keep one (a list of configs "
                                       "in space.base, or one config as base)")
    base = given("base")
    if isinstance(base, str):
        base = _find_config(ck, "base", base, path)
    elif base is None and BASE_PARAM not in space_data:
        ck.fail("base", "missing (required): a training config (a path or a mapping), or a "
                        "`base: {choices: [...]}` parameter in space")
    elif base is not None and not isinstance(base, dict):
        ck.fail("base", "must be a path to a training config or a mapping")

    objective = ck.mapping("objective", data["objective"], inner_keys("objective"))
    metric = objective.get("metric")
    if not isinstance(metric, str) or not metric:
        ck.fail("objective.metric", "must be a metric name such as val_bleu or val_ppl")
    direction = ck.choice("objective.direction", objective.get("direction"), DIRECTIONS)
    if metric_facts.row(metric) and (direction == "maximize") != metric_facts.higher_is_better(metric):
        better = "higher" if metric_facts.higher_is_better(metric) else "lower"
        ck.fail("objective.direction", f"{direction}, but {metric} is better {better}: the sampler and the "
                                       f"pruner would chase the worst runs")

    sampler, sampler_options = ck.named("sampler", given("sampler"), SAMPLER_OPTIONS)
    pruner, pruner_options = ck.named("pruner", given("pruner"), PRUNER_OPTIONS)

    seeds = given("seeds")
    if not isinstance(seeds, list):   # N: seeds 0..N-1 (at most as many as cells a grid may have)
        seeds = list(range(ck.int("seeds", seeds, 1, max_cells)))
    for s in seeds:
        ck.int("seeds", s, *SEED_RANGE)
    if not seeds or len(set(seeds)) != len(seeds):
        ck.fail("seeds", "must be one or more seeds, each once")

    n_trials = given("n_trials")
    if n_trials is not None:
        ck.int("n_trials", n_trials, 1)

    storage = given("storage")
    if storage is not None and (not isinstance(storage, str) or "://" not in storage):
        ck.fail("storage", "must be a database URL such as sqlite:///runs/x.db or postgresql+psycopg2://...")
    root = given("root")
    if not isinstance(root, (str, Path)):
        ck.fail("root", "must be a path")
    tracking = ck.choice("tracking", given("tracking"), tuple(registry.TRACKING))
    workers = ck.int("workers", given("workers"), 1)

    fixed = dict(ck.mapping("fixed", given("fixed") or {}))
    for k, v in fixed.items():
        if not isinstance(k, str) or not k.startswith(PREFIXES):
            ck.fail(f"fixed.{k}", f"keys are dotted config keys starting with {', '.join(PREFIXES)}")
        valid = registry.config_choices(k, kind, [fixed["model.family"]] if "model.family" in fixed else None)
        if valid is not None:
            ck.choice(f"fixed.{k}", v, valid)

    heartbeat = ck.mapping("heartbeat", data.get("heartbeat") or {}, inner_keys("heartbeat"))
    for k, v in heartbeat.items():
        ck.int(f"heartbeat.{k}", v, 0 if k == "max_retry" else 1)
    interval = heartbeat.get("interval", default("heartbeat.interval"))
    grace = heartbeat.get("grace_period", 3 * interval)
    if grace <= interval:
        ck.fail("heartbeat.grace_period", f"must be longer than the interval ({interval} s)")

    if not space_data:
        ck.fail("space", "must declare at least one parameter")
    declared: dict[str, Param] = {}
    bases, base_files, base_families = {}, {}, {}
    for pname, spec in space_data.items():
        spec = {"choices": spec} if isinstance(spec, list) else spec
        if pname == BASE_PARAM:
            declared[pname], bases, base_files, base_families = _parse_bases(ck, spec, path, kind)
            continue
        if isinstance(pname, str) and config_name(pname) in fixed:
            ck.fail(f"space.{pname}", "also set in fixed")
        declared[pname] = _parse_param(ck, pname, spec, declared, kind)
    space = list(declared.values())

    if sampler in ("grid", "bruteforce"):
        for p in space:
            if not p.finite:
                ck.fail(f"space.{p.name}", f"the {sampler} sampler needs choices or a step (no continuous ranges)")
        if count(space, max_cells // len(seeds) + 1) * len(seeds) > max_cells:
            ck.fail("space", f"the grid has more than {max_cells:,} cells (configurations x seeds); "
                             "narrow it, or raise the limit with --max-cells N")
    elif n_trials is None:
        ck.fail("n_trials", f"required with the {sampler} sampler")
    elif n_trials % len(seeds):
        ck.fail("n_trials", f"must be a multiple of the number of seeds ({len(seeds)}): "
                            "every sampled configuration runs once per seed")

    sweep = Sweep(path=path, study_name=name, base=base, objective=metric, direction=direction,
                  space=space, sampler=sampler, sampler_options=sampler_options, pruner=pruner,
                  pruner_options=pruner_options, seeds=seeds, n_trials=n_trials, storage=storage,
                  root=Path(root), fixed=fixed, kind=kind, tracking=tracking,
                  heartbeat_interval=interval, grace_period=grace,
                  max_retry=heartbeat.get("max_retry", default("heartbeat.max_retry")),
                  description=str(given("description")),
                  workers=workers, lines=ck.lines, bases=bases, base_files=base_files)
    _check_cells(ck, sweep, base_families)
    return sweep


def load_sweep(path: Path | str, max_cells: int = MAX_CELLS) -> Sweep:
    """Read and validate a sweep file; raises SweepError naming the file, line and key."""
    data, lines = read_yaml(Path(path))
    return parse_sweep(data, path, lines, max_cells)
