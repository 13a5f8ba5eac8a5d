"""YAML that would run code if loaded unsafely (a python/object tag) is refused with exit 2 by every
command that reads a user's YAML, and nothing runs."""

import random
import time

import pytest

from conftest import CONFIGS, cli_in_process
from lit_attention.files import MAX_YAML_BYTES, FileError, read_yaml

EVIL = '!!python/object/apply:os.system ["touch {marker}"]'


@pytest.mark.parametrize("where", ["sweep file", "sweep base config", "fit config"])
def test_a_python_tag_is_refused_and_runs_nothing(tmp_path, where):
    marker = tmp_path / "ran"
    evil = EVIL.format(marker=marker)
    base = CONFIGS / "copy.yaml"
    if where == "sweep base config":
        base = tmp_path / "base.yaml"
        base.write_text(f"seed_everything: {evil}\n")
    sweep = tmp_path / "sweep.yaml"
    name = evil if where == "sweep file" else "s"
    sweep.write_text(f"study_name: {name}\nbase: {base}\nsampler: grid\nseeds: 1\nroot: {tmp_path / 'runs'}\n"
                     "objective: {metric: val_loss, direction: minimize}\n"
                     "space:\n  model.lr: {choices: [0.001]}\n")
    if where == "fit config":
        config = tmp_path / "fit.yaml"
        config.write_text(f"seed_everything: {evil}\n")
        out = cli_in_process("fit", "--config", config, "--run.root", tmp_path / "runs")
    else:
        out = cli_in_process("sweep", sweep)   # refused before any process starts: this one would run it
    assert out.returncode == 2, out.stdout + out.stderr
    assert "python/object/apply:os.system" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not marker.exists() and not (tmp_path / "runs").exists()


def the_line(stderr: str) -> str:
    """The one line of stderr (besides LightningCLI's warning that the test's own argv differs
    from the arguments it is given), of a few hundred characters at most."""
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(" ")
             and "args parameter is intended" not in line]
    assert len(lines) == 1 and len(lines[0]) < 400, stderr[-3000:]
    return lines[0]


def _bomb(levels: int = 8) -> str:
    """A mapping of ``levels`` lines whose last alias expands to 9 ** (levels + 1) strings."""
    return "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(levels))


# What the strict reader refuses in a fit config: (file content, what the one line says)
REFUSED = {
    "duplicate key": (b"trainer:\n  max_epochs: 1\n  max_epochs: 2\n",
                      "x.yaml:3: trainer.max_epochs: duplicate key (first at line 2)"),
    "repeated section": (b"trainer: {max_epochs: 1}\nseed_everything: 3\ntrainer: {max_steps: 4}\n",
                         "x.yaml:3: trainer: duplicate key (first at line 1)"),
    "alias bomb": (("model:\n  init_args:\n" + "".join(f"    {line}\n" for line in _bomb().splitlines())).encode(),
                   "YAML nodes once aliases are expanded (an alias bomb?)"),
    "a list": (b"- 1\n- 2\n", "x.yaml:1: (top level): must be a mapping of keys, got a list"),
    "empty": (b"# nothing yet\n", "(top level): must be a mapping of keys, got an empty document"),
    "two documents": (b"trainer: {max_epochs: 1}\n---\ntrainer: {max_epochs: 2}\n",
                      "expected a single document"),
    "not UTF-8": (b"seed_everything: 1  # caf\xe9\n", "x.yaml: (file): not UTF-8 text"),
    "too large": (b"seed_everything: 1\n#" + b"x" * MAX_YAML_BYTES + b"\n", f"more than {MAX_YAML_BYTES:,} bytes"),
    "too deep": (b"seed_everything: " + b"[" * 5000 + b"\n", "(yaml): not valid YAML"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_fit_config_the_strict_reader_refuses_stops_fit_in_one_line(tmp_path, case):
    """A config the strict YAML reader refuses stops `fit` before anything is written, in one short
    line naming the file, the line and the key, within a second of the parse."""
    text, message = REFUSED[case]
    config = tmp_path / "x.yaml"
    config.write_bytes(text)
    start = time.perf_counter()
    out = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--config", config,
                         "--run.root", tmp_path / "runs")
    assert time.perf_counter() - start < 5
    assert out.returncode == 2, out.stderr[-2000:]
    assert message in the_line(out.stderr)
    assert not (tmp_path / "runs").exists()


def test_a_strict_reading_holds_for_validate_and_for_a_config_inside_an_option(tmp_path):
    """`validate` reads its config as `fit` does (-c is --config); a YAML file given as an
    option's value (not --config) goes through the same reader."""
    config = tmp_path / "x.yaml"
    config.write_bytes(REFUSED["duplicate key"][0])
    out = cli_in_process("validate", "--config", CONFIGS / "copy.yaml", "-c", config,
                         "--run.root", tmp_path / "runs")
    assert out.returncode == 2 and f"{config}:3: trainer.max_epochs: duplicate key" in the_line(out.stderr)
    model = tmp_path / "model.yaml"
    model.write_text("class_path: lit_attention.lightning.translation.TranslationModule\n"
                     "init_args:\n  lr: 0.1\n  lr: 0.2\n")
    out = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--model", model,
                         "--run.root", tmp_path / "runs")
    assert out.returncode == 2 and "4: init_args.lr: duplicate key" in the_line(out.stderr)
    assert not (tmp_path / "runs").exists()


# Pieces of a fit config: valid lines, a duplicate, anchors and aliases, garbage
PIECES = ["seed_everything: 3\n", "trainer:\n  max_epochs: 2\n", "trainer:\n  max_steps: 5\n",
          "trainer: {max_epochs: 1, max_epochs: 2}\n", "seed_everything: &s 4\n", "x: *s\n",
          "model:\n  init_args: &m {lr: 0.001}\n", "data:\n  init_args: *m\n", "  - [\n", "&a\n",
          "]]]:\n", "trainer:\n\tmax_epochs: 1\n", "!!binary xx\n", "? [a]\n: 1\n", "'\n", "*undefined\n"]


def random_config(rng: random.Random) -> bytes:
    pieces = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 6))).encode()
    return pieces + bytes(rng.randrange(256) for _ in range(rng.randint(0, 8)))


@pytest.mark.slow
def test_fuzz_fit_config_exits_2_in_one_line(tmp_path):
    """Random configs of real keys, duplicates, aliases and garbage through `fit --config`: exit 2
    (the valid ones meet --trainer.max_epochs 0, a value `fit` refuses), one short line, nothing
    written."""
    rng = random.Random(52)
    config = tmp_path / "x.yaml"
    for _ in range(12):
        config.write_bytes(random_config(rng))
        out = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--config", config,
                             "--trainer.max_epochs", "0", "--run.root", tmp_path / "runs")
        assert out.returncode == 2 and the_line(out.stderr), config.read_bytes()
        assert not (tmp_path / "runs").exists()


def test_fuzz_the_strict_reader_returns_a_mapping_or_one_line():
    """read_yaml of random text: a mapping with a line for each of its keys, or a FileError of
    one short line naming the file."""
    rng = random.Random(52)
    for _ in range(300):
        text = random_config(rng).decode("utf-8", "replace")
        try:
            data, lines = read_yaml(text, "f.yaml")
        except FileError as e:
            assert str(e).startswith("f.yaml") and "\n" not in str(e) and len(str(e)) < 400, (text, str(e))
            continue
        assert isinstance(data, dict) and all(str(k) in lines for k in data), text


def test_a_huge_invalid_value_is_shown_cut_with_its_size(tmp_path):
    """A 200,000-character value where a number belongs was quoted whole in the error line."""
    config = tmp_path / "x.yaml"
    config.write_text("model:\n  init_args:\n    lr: " + "k" * 200_000 + "\n")
    out = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--config", config,
                         "--run.root", tmp_path / "runs")
    assert out.returncode == 2
    line = the_line(out.stderr)
    assert line.startswith("lit-attention fit: error: invalid value for model.lr: expected float, got 'kkk")
    assert line.endswith("... (200,000 characters)'")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("where", ["base", "base choice"])
def test_a_sweep_base_config_with_a_key_twice_stops_the_sweep_before_its_first_trial(tmp_path, where):
    base = tmp_path / "base.yaml"
    base.write_text((CONFIGS / "copy.yaml").read_text() + "seed_everything: 1\nseed_everything: 2\n")
    first = f"base: {base}\n" if where == "base" else ""
    choices = f"  base: {{choices: [{base}]}}\n" if where == "base choice" else ""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"study_name: s\n{first}sampler: grid\nseeds: 1\nroot: {tmp_path / 'runs'}\n"
                     "objective: {metric: val_loss, direction: minimize}\n"
                     f"space:\n{choices}  model.lr: {{choices: [0.001]}}\n")
    out = cli_in_process("sweep", sweep)
    assert out.returncode == 2
    assert f"{base}:" in the_line(out.stderr) and "seed_everything: duplicate key" in the_line(out.stderr)
    assert not (tmp_path / "runs").exists()
