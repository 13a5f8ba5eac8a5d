"""A class a `class_path` names that cannot be used (its package missing, an argument missing, its
module absent) is the reason shown, not the complaints of the union's other members."""

from importlib.util import find_spec

import pytest

from conftest import CONFIGS, cli_in_process

NO_TENSORBOARD = find_spec("tensorboard") is None and find_spec("tensorboardX") is None
TB = "lightning.pytorch.loggers.TensorBoardLogger"


@pytest.mark.skipif(not NO_TENSORBOARD, reason="tensorboard is installed here: the logger would work")
def test_a_logger_whose_package_is_missing_names_the_package(tmp_path):
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path,
                            "--trainer.logger", TB, "--trainer.logger.save_dir", tmp_path / "tb")
    assert result.returncode == 2, result.stderr
    error = result.stderr[result.stderr.index("lit-attention fit: error: "):]
    assert error.startswith(f"lit-attention fit: error: invalid configuration: {TB}: Neither `tensorboard` "
                            "nor `tensorboardX` is available."), error
    assert "Expected a" not in error and len(error) < 600


@pytest.mark.parametrize("logger, reason", [
    (TB, f"invalid value for trainer.logger: {TB}: the following arguments are required: save_dir"),
    ("nosuch.Logger", "invalid value for trainer.logger: nosuch.Logger: No module named 'nosuch'"),
])
def test_a_class_path_that_cannot_be_parsed_is_its_own_reason(tmp_path, logger, reason):
    result = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", tmp_path,
                            "--trainer.logger", logger)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"lit-attention fit: error: {reason}"
    assert not any(tmp_path.iterdir())
