"""Sweep files, search spaces and the study bookkeeping: fast tests, no training."""

import os
import time
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from conftest import REPO
from lit_attention import registry
from lit_attention.sweep import cli, driver, progress, schema, space
from lit_attention.sweep.schema import SweepError, load_sweep
from lit_attention.sweep.storage import mask_url
from lit_attention.tracking.schema import config_name
from lit_attention.sweep.trial import build_command, validation_values

COPY = REPO / "configs" / "copy.yaml"

GOOD = {
    "study_name": "s",
    "base": str(COPY),
    "objective": {"metric": "val_loss", "direction": "minimize"},
    "seeds": 2,
    "space": {
        "model.family": {"choices": ["rnn", "transformer"]},
        "model.attention": {"choices": ["none", "luong"], "when": {"model.family": "rnn"}},
        "model.scoring": {"choices": ["dot", "additive"], "when": {"model.attention": {"not": "none"}}},
        "model.heads": {"choices": [2, 4], "when": {"model.family": "transformer"}},
    },
}


def write(tmp_path, data, name="sweep.yaml") -> Path:
    data = dict(data)
    data.setdefault("root", str(tmp_path / "runs"))
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "sweeps").glob("*.yaml")))
def test_shipped_sweeps_validate(name):
    sweep = load_sweep(REPO / "sweeps" / f"{name}.yaml")
    assert sweep.study_name == name
    for p in sweep.space:
        valid = None
        key = config_name(p.name)
        if key.endswith(".family"):
            valid = registry.LM_FAMILIES if sweep.kind == "lm" else registry.FAMILIES
        if valid and p.choices:
            assert set(p.choices) <= set(valid)


def test_demo_is_four_configurations_times_two_seeds():
    sweep = load_sweep(REPO / "sweeps" / "demo.yaml")
    cells = driver.planned_cells(sweep)
    assert len(cells) == 8
    configs = {space.config_key(c) for c in cells}
    assert len(configs) == 4
    assert {c.get("model.scoring") for c in cells} == {None, "dot", "additive"}
    assert sum(c["model.family"] == "transformer" for c in cells) == 2


def test_conditions_enumerate_only_active_parameters(tmp_path):
    sweep = load_sweep(write(tmp_path, GOOD))
    configs = space.grid(sweep.space)
    # rnn: none, luong x {dot, additive}; transformer: heads 2, 4
    assert len(configs) == 5
    assert {"model.family": "rnn", "model.attention": "none"} in configs
    assert all("model.heads" not in c for c in configs if c["model.family"] == "rnn")
    assert all("model.scoring" not in c for c in configs if c.get("model.attention") == "none")
    assert len(driver.planned_cells(sweep)) == 10   # x 2 seeds


def test_suggest_follows_conditions_and_enqueued_values():
    sweep_space = load_sweep_from_dict(GOOD).space
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for cell in space.grid(sweep_space):
        study.enqueue_trial(cell)
    seen = []
    for _ in range(5):
        t = study.ask()
        seen.append(space.suggest(t, sweep_space))
        study.tell(t, 0.0)
    assert seen == space.grid(sweep_space)
    for _ in range(20):  # sampled trials respect the conditions too
        t = study.ask()
        p = space.suggest(t, sweep_space)
        assert ("model.heads" in p) == (p["model.family"] == "transformer")
        assert ("model.scoring" in p) == (p.get("model.attention") == "luong")
        study.tell(t, 0.0)


def load_sweep_from_dict(data):
    from lit_attention.sweep.schema import parse_sweep
    return parse_sweep(data, "inline.yaml")


BAD = [
    ("unknown top-level key", {"sampel": "grid"}, "sampel"),
    ("wrong type", {"seeds": "two"}, "seeds"),
    ("empty choices", {"space": {"model.family": {"choices": []}}}, "space.model.family.choices"),
    ("unknown model choice", {"space": {"model.family": {"choices": ["rnn", "lstm-transformer"]}}},
     "space.model.family.choices"),
    ("unknown scoring", {"space": {"model.scoring": ["dot", "cosine"]}}, "space.model.scoring.choices"),
    ("transformer scoring", {"space": {"model.family": ["transformer"], "model.scoring": ["low_rank"]}},
     "space.model.scoring"),
    ("transformer scoring, family fixed", {"fixed": {"model.family": "transformer"},
                                           "space": {"model.scoring": ["scaled_dot", "low_rank"]}},
     "space.model.scoring"),
    ("unknown encoder output", {"space": {"model.enc_output": ["concat", "both"]}},
     "space.model.enc_output.choices"),
    ("unknown tracking", {"tracking": "mlflow"}, "tracking"),
    ("unknown task", {"fixed": {"data.task": "cipher"}}, "fixed.data.task"),
    ("unknown sentencepiece model", {"fixed": {"data.spm_model": "wordpiece"}}, "fixed.data.spm_model"),
    ("unknown n-gram smoothing", {"kind": "lm", "space": {"model.smoothing": ["add", "kneser-ney"]}},
     "space.model.smoothing.choices"),
    ("condition on undeclared", {"space": {"model.heads": {"choices": [2], "when": {"model.family": "transformer"}}}},
     "space.model.heads.when.model.family"),
    ("unknown sampler", {"sampler": "cmaes"}, "sampler.name"),
    ("unknown pruner option", {"pruner": {"name": "median", "patience": 3}}, "pruner.patience"),
    ("continuous range in a grid", {"space": {"model.lr": {"low": 1e-4, "high": 1e-2, "log": True}}},
     "space.model.lr"),
    ("random without n_trials", {"sampler": "random"}, "n_trials"),
    ("missing base", {"base": "nowhere/config.yaml"}, "base"),
    ("bad direction", {"objective": {"metric": "val_bleu", "direction": "up"}}, "objective.direction"),
    ("not a config key", {"space": {"lr": [1, 2]}}, "space.lr"),
    # values Optuna refuses only once the study is open (exit 1, "cannot open the study", a study.db
    # left), takes without acting on them, or reads against what the sweep asked for
    ("a seed above 2**32-1", {"seeds": [1, 2 ** 32]}, "seeds"),    # named as `seeds`, not `space`
    ("more seeds than a grid has cells", {"seeds": 10 ** 21}, "seeds"),   # no list of 10^21 seeds
    ("sampler seed below 0", {"sampler": {"name": "tpe", "seed": -1}}, "sampler.seed"),
    ("sampler seed above 2**32-1", {"sampler": {"name": "random", "seed": 2 ** 32}}, "sampler.seed"),
    ("option the grid sampler does not read", {"sampler": {"name": "grid", "seed": 3}}, "sampler.seed"),
    ("startup trials below 0", {"sampler": {"name": "tpe", "n_startup_trials": -1}}, "sampler.n_startup_trials"),
    ("median interval of 0", {"pruner": {"name": "median", "interval_steps": 0}}, "pruner.interval_steps"),
    ("hyperband reduction factor 1", {"pruner": {"name": "hyperband", "reduction_factor": 1}},
     "pruner.reduction_factor"),
    ("hyperband min above max", {"pruner": {"name": "hyperband", "min_resource": 10, "max_resource": 2}},
     "pruner.max_resource"),
    ("maximizing a loss", {"objective": {"metric": "val_loss", "direction": "maximize"}}, "objective.direction"),
]


@pytest.mark.parametrize("case,patch,key", BAD, ids=[b[0] for b in BAD])
def test_malformed_sweep_exits_2_naming_file_and_key_without_a_study(tmp_path, capsys, case, patch, key):
    data = {**GOOD, **patch}
    path = write(tmp_path, data, name=f"bad-{case.replace(' ', '_')}.yaml")
    with pytest.raises(SweepError) as err:
        load_sweep(path)
    assert err.value.key == key
    assert cli.main([str(path)]) == 2
    stderr = capsys.readouterr().err
    assert path.name in stderr and key in stderr
    assert not (tmp_path / "runs").exists()  # no study database, no run directory


def test_yaml_syntax_error_names_the_line(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("study_name: x\nspace: {model.family: [rnn\n")
    assert cli.main([str(path)]) == 2
    assert "broken.yaml:3: (yaml): not valid YAML" in capsys.readouterr().err


def test_mask_url_hides_the_password():
    url = "postgresql+psycopg2://alice:s3cr3t-pw@db.example:5432/studies"
    masked = mask_url(url)
    assert "s3cr3t-pw" not in masked and "alice" in masked and "db.example" in masked
    assert mask_url("sqlite:////tmp/x/study.db") == "sqlite:////tmp/x/study.db"


def test_trial_command_follows_the_contract(tmp_path):
    cmd = build_command(base=COPY, root=tmp_path, study="s", run_id="t0003-s1", seed=1,
                        params={"model.family": "rnn", "model.scoring@rnn": "dot", "model.lr": 0.001},
                        fixed={"model.lr": 0.5, "trainer.max_epochs": 2, "trainer.enable_progress_bar": False},
                        tracking="wandb", name="s-t3-s1", devices=2)
    joined = " ".join(cmd)
    assert "--run.group s --run.id t0003-s1 --seed_everything 1 --tracking wandb" in joined
    assert "--run.name s-t3-s1" in joined and "--run.job_type trial" in joined
    assert "--model.scoring dot" in joined  # the @suffix only names the Optuna parameter
    assert "--model.lr 0.001" in joined and "0.5" not in cmd  # the trial's value wins over fixed
    assert "--trainer.enable_progress_bar false" in joined
    assert "--trainer.devices 2 --trainer.strategy ddp" in joined
    assert "--trainer.accelerator" not in joined  # the config's (auto) unless --accelerator is given
    tags = cmd[cmd.index("--run.tags") + 1].split(",")
    assert set(tags) == {"family:rnn", "scoring:dot"}


def test_validation_rows_are_read_from_metrics_csv(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,epoch,train_loss,val_loss\n9,0,4.0,\n9,0,,3.5\n19,1,3.0,\n19,1,,2.5\n")
    assert validation_values(path, "val_loss") == [(9, 3.5), (19, 2.5)]   # global steps, not counts
    assert validation_values(tmp_path / "missing.csv", "val_loss") == []


def test_the_progress_line_counts_every_seed_and_skips_a_skipped_trial(tmp_path):
    study = optuna.create_study(direction="maximize")
    dist = {"model.family": optuna.distributions.CategoricalDistribution(["rnn", "transformer"]),
            "seed": optuna.distributions.CategoricalDistribution([0, 1])}
    for family, seed, value in [("rnn", 0, 10.0), ("rnn", 1, 14.0), ("transformer", 0, 30.0),
                                ("transformer", 1, 34.0)]:
        study.add_trial(optuna.create_trial(params={"model.family": family, "seed": seed},
                                            distributions=dist, value=value))
    study.add_trial(optuna.create_trial(params={"model.family": "rnn", "seed": 0}, distributions=dist,
                                        state=optuna.trial.TrialState.FAIL,
                                        user_attrs={"skipped": "duplicate"}))
    line = progress.progress_line(study, "val_bleu", total=4)
    assert "4/4 done" in line and "0 failed" in line and "best val_bleu=34" in line


def test_guarded_processes_take_sigint_even_when_their_parent_ignores_it():
    # A sweep started as a script's background job inherits SIGINT ignored; the workers and trials
    # it starts through the guard must still stop on the SIGINT the driver sends them.
    show = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    guarded = f"exec {sys.executable} -m lit_attention.sweep.guard {os.getpid()} {sys.executable} -c '{show}'"
    plain = f"exec {sys.executable} -c '{show}'"
    out = {name: subprocess.run(["bash", "-c", f"trap '' INT; {cmd}"], capture_output=True, text=True,
                                cwd=REPO).stdout.strip() for name, cmd in (("guarded", guarded), ("plain", plain))}
    assert out == {"guarded": "True", "plain": "False"}


# -- strict sweep files -------------------------------------------------------------------------

def _text(tmp_path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text.replace("COPY", str(COPY)).replace("ROOT", str(tmp_path / "runs")))
    return path


HEAD = """study_name: s
base: COPY
root: ROOT
objective: {metric: val_loss, direction: minimize}
"""


def test_a_duplicate_key_is_an_error_naming_both_lines(tmp_path, capsys):
    path = _text(tmp_path, HEAD + "space:\n  model.lr: {choices: [0.1]}\n  model.lr: {choices: [0.2]}\n")
    with pytest.raises(SweepError) as err:
        load_sweep(path)
    assert (err.value.key, err.value.line) == ("space.model.lr", 7)
    assert "first at line 6" in str(err.value)
    assert cli.main([str(path)]) == 2
    assert f"{path}:7: space.model.lr: duplicate key" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("choices, pair", [
    ("[0.1, 0.10]", "choices 1 and 2 (0.1 and 0.1)"),
    ("[0.2, 1, 1.0]", "choices 2 and 3 (1 and 1.0)"),
    ("[a, b, a]", "choices 1 and 3 ('a' and 'a')"),
    ("[1e-3, 0.001]", "choices 1 and 2 ('1e-3' and 0.001)"),     # YAML reads 1e-3 as text
    ("[0x10, 16]", "choices 1 and 2 (16 and 16)"),
])
def test_choices_that_are_one_value_are_refused_naming_the_pair(tmp_path, capsys, choices, pair):
    """Such a space runs one configuration twice, and the report counts its runs as seeds."""
    path = _text(tmp_path, HEAD + f"space:\n  model.lr: {{choices: {choices}}}\n")
    assert cli.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:6: space.model.lr.choices: {pair} are one value" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()


def test_choices_that_differ_are_kept(tmp_path):
    path = _text(tmp_path, HEAD + "space:\n  model.lr: [1, 2, 1.5]\n  model.dropout: [0, false]\n")
    assert [p.choices for p in load_sweep(path).space] == [(1, 2, 1.5), (0, False)]


def test_an_unknown_top_level_key_names_its_line_and_the_nearest_key(tmp_path):
    path = _text(tmp_path, HEAD + "sampel: grid\nspace:\n  model.lr: [0.1]\n")
    with pytest.raises(SweepError, match=r"s.yaml:5: sampel: unknown key — did you mean sampler\?"):
        load_sweep(path)


@pytest.mark.parametrize("bounds,key", [("{low: .nan, high: 1.0}", "low"), ("{low: 0.0, high: .inf}", "high"),
                                         ("{low: 0.0, high: 1.0, step: .nan}", "step")])
def test_non_finite_bounds_are_errors(tmp_path, bounds, key):
    path = _text(tmp_path, HEAD + f"sampler: random\nn_trials: 2\nspace:\n  model.dropout: {bounds}\n")
    with pytest.raises(SweepError, match="must be a finite number") as err:
        load_sweep(path)
    assert err.value.key == f"space.model.dropout.{key}" and err.value.line == 8


def test_a_float_step_between_integer_bounds_is_an_error(tmp_path):
    path = _text(tmp_path, HEAD + "space:\n  model.d_model: {low: 32, high: 64, step: 16.0}\n")
    with pytest.raises(SweepError, match="a float step") as err:
        load_sweep(path)
    assert err.value.key == "space.model.d_model.step"


def test_an_alias_bomb_fails_fast(tmp_path):
    bomb = "description:\n  a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
    path = _text(tmp_path, HEAD + bomb + "space: {model.lr: [0.1]}\n")   # 9^9 strings once expanded
    start = time.perf_counter()
    with pytest.raises(SweepError, match="alias bomb"):
        load_sweep(path)
    assert time.perf_counter() - start < 2


def test_a_huge_grid_is_refused_without_enumerating_it(tmp_path, capsys):
    ranges = "".join(f"  model.p{i}: {{low: 1, high: 1000}}\n" for i in range(6))   # 10^18 cells
    path = _text(tmp_path, HEAD + "space:\n" + ranges)
    start = time.perf_counter()
    with pytest.raises(SweepError, match="more than 10,000 cells") as err:
        load_sweep(path)
    assert time.perf_counter() - start < 2 and err.value.key == "space"


def test_the_cell_limit_is_a_flag(tmp_path, capsys):
    path = write(tmp_path, GOOD)                     # 5 configurations x 2 seeds
    assert len(driver.planned_cells(load_sweep(path))) == 10
    assert cli.main([str(path), "--max-cells", "9"]) == 2
    err = capsys.readouterr().err
    assert "more than 9 cells" in err and "--max-cells" in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["demo", "scoring", "transformer", "lm"])
def test_counting_cells_matches_enumerating_them(name):
    sweep = load_sweep(REPO / "sweeps" / f"{name}.yaml")
    assert space.count(sweep.space, 10_000) == len(space.grid(sweep.space))
    assert space.count(load_sweep_from_dict(GOOD).space, 10_000) == 5


# -- a space that varies the training config itself (`base: {choices: [files]}`) -------------------

def rnn_config(tmp_path, name="copy-gru.yaml") -> Path:
    """configs/copy.yaml as a GRU with attention: a second base that differs in many keys."""
    from conftest import family_neutral
    data = family_neutral(COPY)
    data["model"]["init_args"].update(family="rnn", cell="gru", attention="bahdanau", scoring="additive")
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def based(tmp_path, choices, **extra) -> Path:
    data = {k: v for k, v in GOOD.items() if k not in ("base", "space")}
    data["space"] = {"base": {"choices": choices}, **extra.pop("space", {})}
    return write(tmp_path, {**data, **extra})


def test_base_choices_are_named_by_their_stems_in_the_study_the_progress_and_the_run(tmp_path):
    rnn = rnn_config(tmp_path)
    path = based(tmp_path, [str(COPY), rnn.name],      # absolute, and relative to the sweep file
                 space={"model.heads": {"choices": [2], "when": {"base": "copy"}}})
    sweep = load_sweep(path)
    assert sweep.base is None and sweep.bases == {"copy": COPY.resolve(), "copy-gru": rnn.resolve()}
    assert sweep.spec()["bases"] == {"copy": str(COPY), "copy-gru": "copy-gru.yaml"}
    cells = driver.planned_cells(sweep)
    assert cells == [{"base": "copy", "model.heads": 2, "seed": 0}, {"base": "copy", "model.heads": 2, "seed": 1},
                     {"base": "copy-gru", "seed": 0}, {"base": "copy-gru", "seed": 1}]
    assert progress.short_params(cells[2]) == "base=copy-gru"
    commands = driver.first_commands(sweep, tmp_path / "runs", len(cells))
    cmd = commands[2]
    assert cmd[cmd.index("--config") + 1] == str(rnn.resolve())
    assert cmd[cmd.index("--run.tags") + 1] == "base:copy-gru"
    assert "--base" not in cmd and "--model.heads" not in cmd
    assert commands[0][commands[0].index("--model.heads") + 1] == "2"
    driver.check_trials(sweep, tmp_path / "runs")    # both files pass the training CLI's parser
    assert not (tmp_path / "runs").exists()
    # a sweep with one base keeps the spec (and so the study) it had
    assert "bases" not in load_sweep(write(tmp_path, GOOD, name="one.yaml")).spec()


@pytest.mark.parametrize("case,choices,extra,key,message", [
    ("missing file", ["COPY", "nowhere.yaml"], {}, "space.base.choices[1]", "training config 'nowhere.yaml' not found"),
    ("same stem", ["COPY", "sub/copy.yaml"], {}, "space.base.choices[1]", "has the same stem as"),
    ("not a mapping", ["COPY", "list.yaml"], {}, "space.base.choices[1]", "must be a mapping of keys"),
    ("not YAML", ["COPY", "broken.yaml"], {}, "space.base.choices[1]", "not valid YAML"),
    ("a condition", {"choices": ["COPY"], "when": {}}, {}, "space.base.when", "takes only `choices`"),
    ("both bases", ["COPY"], {"base": "COPY"}, "space.base", "also has a top-level base"),
    ("another kind", ["COPY", str(REPO / "configs" / "reference" / "shakespeare-ngram.yaml")], {},
     "space.base.choices[1]", "model.family 'ngram' is not a family of kind 'seq2seq'"),
    ("family of the base", ["COPY"], {"space": {"model.scoring": ["dot", "low_rank"]}}, "space.model.scoring",
     "the family of base choice 'copy'"),
])
def test_a_bad_base_choice_names_the_file_and_the_choice(tmp_path, capsys, case, choices, extra, key, message):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "copy.yaml").write_text(COPY.read_text())
    (tmp_path / "list.yaml").write_text("- 1\n")
    (tmp_path / "broken.yaml").write_text("model: [\n")
    fix = lambda v: str(COPY) if v == "COPY" else v   # noqa: E731
    spec = {**choices, "choices": [fix(c) for c in choices["choices"]]} if isinstance(choices, dict) \
        else [fix(c) for c in choices]
    extra = {k: fix(v) for k, v in extra.items()}
    data = {k: v for k, v in GOOD.items() if k not in ("base", "space")}
    data["space"] = {"base": spec, **extra.pop("space", {})}
    path = write(tmp_path, {**data, **extra}, name=f"bad-{case.replace(' ', '_')}.yaml")
    with pytest.raises(SweepError) as err:
        load_sweep(path)
    assert err.value.key == key and message in str(err.value), str(err.value)
    assert err.value.line is not None
    assert cli.main([str(path)]) == 2
    assert key in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_base_choice_the_training_cli_refuses_is_named_with_its_file(tmp_path, capsys):
    bad = tmp_path / "typo.yaml"
    bad.write_text(COPY.read_text().replace("heads: 4", "hedas: 4"))
    path = based(tmp_path, [str(COPY), bad.name])
    assert cli.main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{path.name}:" in err and "space.base.choices[1]: base choice 'typo'" in err, err
    assert str(bad.resolve()) in err and "unknown option model.hedas" in err, err
    assert not (tmp_path / "runs").exists()


REFERENCE = REPO / "configs" / "reference"
HEADLINE = ("multi30k-transformer", "multi30k-lstm-noattn")   # + the best recurrent row with attention


@pytest.mark.parametrize("name,prefix", [("reference-multi30k", "multi30k-"),
                                         ("reference-shakespeare", "shakespeare-")])
def test_each_reference_sweep_lists_every_reference_row_and_its_trials_in_a_dry_run(name, prefix, monkeypatch, capsys):
    """--dry-run parses every trial with the training CLI (no data needed: nothing is built) and
    prints each trial's command; every reference config is a row with enough seeds (>= 3 for the rows the headline rests on, and which recurrent row with attention is best is
    not known before the runs, so every recurrent row with attention too; >= 2 for the rest)."""
    monkeypatch.chdir(REPO)   # the sweeps are run from the repository root
    path = REPO / "sweeps" / f"{name}.yaml"
    sweep = load_sweep(path)
    assert set(sweep.bases) == {p.stem for p in REFERENCE.glob(f"{prefix}*.yaml")}
    seeds = {}
    for cell in driver.planned_cells(sweep):
        seeds.setdefault(cell["base"], []).append(cell["seed"])
    for stem, got in seeds.items():
        config = yaml.safe_load((REFERENCE / f"{stem}.yaml").read_text())
        headline = stem in HEADLINE or config["model"]["init_args"].get("attention") not in (None, "none")
        assert len(set(got)) >= (3 if prefix == "multi30k-" and headline else 2), (stem, got)
    assert cli.main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    trials = [line for line in out.splitlines() if line.startswith("trial ")]
    assert f"trials: {len(driver.planned_cells(sweep))}, in queue order:" in out
    assert len(trials) == sum(len(s) for s in seeds.values())
    for line, cell in zip(trials, driver.planned_cells(sweep)):
        assert f"--config {REFERENCE.resolve() / cell['base']}.yaml " in line, line
        assert f"--run.tags base:{cell['base']} " in line and f"--seed_everything {cell['seed']} " in line


def test_the_multi30k_scoring_sweep_has_honest_arms_under_the_reference_budget(monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    path = REPO / "sweeps" / "scoring-multi30k.yaml"
    sweep = load_sweep(path)
    base = yaml.safe_load(Path(sweep.base).read_text())
    reference = yaml.safe_load((REFERENCE / "multi30k-transformer.yaml").read_text())
    assert base["budget"] == reference["budget"] and "budget.flops" not in sweep.fixed
    assert base["model"]["init_args"]["family"] == "rnn" and sweep.fixed["model.enc_output"] == "project"
    (scoring,) = sweep.space
    assert set(scoring.choices) == set(registry.SCORING) and sweep.seeds == [0, 1]
    assert cli.main([str(path), "--dry-run"]) == 0
    assert sum(line.startswith("trial ") for line in capsys.readouterr().out.splitlines()) == 12


def test_the_report_gives_every_multi30k_reference_row_its_own_row(tmp_path, monkeypatch):
    """Stand-in run stores of the reference sweep (each run's real config.yaml and the model fields
    its module records; BLEU made up): `lit-attention report` keeps the 7 configs apart by what
    differs between them, and `--rows run.tags` labels the rows by the base's stem."""
    import importlib

    from analysis_stores import write_run
    from lit_attention.analysis import report
    monkeypatch.chdir(REPO)
    sweep = load_sweep(REPO / "sweeps" / "reference-multi30k.yaml")
    for i, cell in enumerate(driver.planned_cells(sweep)):
        config = yaml.safe_load(sweep.bases[cell["base"]].read_text())
        module, _, name = config["model"]["class_path"].rpartition(".")
        model = getattr(importlib.import_module(module), name)(**config["model"]["init_args"]).describe()["model"]
        run_dir = write_run(tmp_path / "runs", sweep.study_name, f"t{i:04d}-s{cell['seed']}", seed=cell["seed"],
                            model=model, val_bleu=30.0 + i)
        config.update(seed_everything=cell["seed"], run={"tags": f"base:{cell['base']}"})
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    study = tmp_path / "runs" / sweep.study_name
    assert report.main([str(study), "--out", str(tmp_path / "a"), "--metric", "val_bleu", "--no-figures"]) == 0
    rows = [line for line in (tmp_path / "a" / "table.md").read_text().splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 7 and all("| 3 " in row for row in rows), rows   # 7 configurations, 3 seeds each
    assert report.main([str(study), "--out", str(tmp_path / "b"), "--metric", "val_bleu", "--no-figures",
                        "--rows", "run.tags"]) == 0
    labelled = (tmp_path / "b" / "table.md").read_text()
    assert all(f"base:{stem}" in labelled for stem in sweep.bases), labelled


def test_a_parameter_whose_conditions_never_hold_together_is_refused(tmp_path):
    """label_smoothing when lr 1e-3 and dropout 0.2, where dropout exists only at lr 3e-3: the key
    would never be sampled, so the sweep file is refused, not run with `--dry-run` exit 0."""
    data = {**GOOD, "space": {
        "model.lr": {"choices": [1.0e-3, 3.0e-3]},
        "model.dropout": {"choices": [0.1, 0.2], "when": {"model.lr": 3.0e-3}},
        "model.label_smoothing": {"choices": [0.0, 0.1], "when": {"model.lr": 1.0e-3, "model.dropout": 0.2}},
    }}
    with pytest.raises(SweepError) as refused:
        load_sweep(write(tmp_path, data))
    assert str(refused.value).endswith(
        "space.model.label_smoothing.when: these conditions never hold together (model.lr in [0.001] and "
        "model.dropout in [0.2]): the parameter would never be sampled; change or remove them"), refused.value
    data["space"]["model.label_smoothing"]["when"] = {"model.lr": 3.0e-3, "model.dropout": 0.2}
    assert load_sweep(write(tmp_path, data)).space[2].name == "model.label_smoothing"   # satisfiable: fine


# -- Each key of a sweep file is one field of `Sweep` (schema.sweep_key) --------------------------

def sweeps_doc_row(key: str, field) -> str:
    """The row of docs/SWEEPS.md's table of sweep keys that a field of `Sweep` makes."""
    meta = field.metadata
    if meta["shown"] or key.partition(".")[0] in schema.REQUIRED:
        shown = meta["shown"] or "(required)"
    else:   # as YAML writes it
        value = schema.default(key)
        value = str(value) if isinstance(value, Path) else value
        shown = "`" + yaml.safe_dump(value, default_flow_style=True).removesuffix("...\n").strip() + "`"
    flag = f" (`{meta['flag']}` overrides it)" if meta["flag"] else ""
    return f"| `{key}` | {shown} | {meta['help']}{flag} |"


def _documented_key_rows() -> list[str]:
    text = (REPO / "docs" / "SWEEPS.md").read_text(encoding="utf-8")
    table = text[text.index("| key | default | meaning |"):].split("\n\n", 1)[0]
    return table.splitlines()[2:]


def test_the_sweeps_doc_lists_every_sweep_key_with_its_default():
    """docs/SWEEPS.md's table of sweep keys is the fields' (this test names a missing or stale row)."""
    rows = [sweeps_doc_row(key, f) for key, f in schema.FIELDS.items()]
    documented = _documented_key_rows()
    for row in rows:
        assert row in documented, f"docs/SWEEPS.md lacks (or has another) row: {row}"
    assert documented == rows, f"docs/SWEEPS.md has rows no field makes: {sorted(set(documented) - set(rows))}"


def test_a_key_the_file_omits_takes_its_fields_default(tmp_path):
    minimal = {k: GOOD[k] for k in ("study_name", "base", "objective", "space")}
    sweep = load_sweep(write(tmp_path, {**minimal, "root": "runs"}))
    omitted = {key: f for key, f in schema.FIELDS.items() if key.partition(".")[0] not in
               (*schema.REQUIRED, "base")}
    assert {"kind", "sampler", "seeds", "heartbeat.interval", "tracking", "workers"} <= set(omitted)
    for key, f in omitted.items():
        assert getattr(sweep, f.name) == schema.default(key), key
    assert (sweep.seeds, sweep.sampler_options, sweep.grace_period) == ([0], {}, 3 * sweep.heartbeat_interval)


def test_options_override_only_the_keys_they_name(tmp_path):
    sweep = load_sweep(write(tmp_path, {**GOOD, "workers": 2, "tracking": "none"}))
    assert schema.OVERRIDES == ("storage", "root", "tracking", "workers")
    same = sweep.with_overrides(workers=None, root=None, storage=None, tracking=None)
    assert same == sweep and same is not sweep
    changed = sweep.with_overrides(workers=5, root=tmp_path / "elsewhere")
    assert (changed.workers, changed.root, changed.tracking) == (5, tmp_path / "elsewhere", "none")
    assert (sweep.workers, sweep.root) == (2, tmp_path / "runs")
    with pytest.raises(TypeError, match="no option overrides \\['seeds'\\]"):
        sweep.with_overrides(seeds=[3])


def test_the_sweep_options_that_override_keys_are_applied(tmp_path, capsys):
    path = write(tmp_path, {**GOOD, "space": {"model.lr": {"choices": [1e-3, 2e-3]}}, "workers": 3})
    assert cli.main([str(path), "--dry-run", "--gpus", "none"]) == 0
    assert "placement: 3 trial(s) at once" in capsys.readouterr().out
    elsewhere = tmp_path / "elsewhere"
    assert cli.main([str(path), "--dry-run", "--gpus", "none", "--workers", "1", "--root", str(elsewhere),
                     "--tracking", "wandb"]) == 0
    out = capsys.readouterr().out
    assert "placement: 1 trial(s) at once" in out
    assert f"--run.root {elsewhere} " in out and "--tracking wandb " in out and "--tracking none" not in out
