"""YAML that would run code if loaded unsafely (a python/object tag) is refused with exit 2 by every
command that reads a user's YAML, and nothing runs."""


import pytest

from conftest import CONFIGS, cli_in_process

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
