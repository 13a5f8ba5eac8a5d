"""Repository-wide rules that a grep can check."""

import re
import subprocess

from conftest import REPO


def _tracked_python_sources():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    return {name: (REPO / name).read_text() for name in files if (REPO / name).is_file()}


def test_every_torch_load_refuses_code():
    """A checkpoint a user is given must not run code: every torch.load says weights_only=True."""
    this = "tests/test_repository.py"
    unsafe = []
    for name, text in _tracked_python_sources().items():
        if name == this:
            continue
        for call in re.finditer(r"torch\.load\((.*?)\)", text, re.S):
            if "weights_only=True" not in call.group(1):
                unsafe.append(f"{name}: {call.group(0)[:80]}")
    assert not unsafe


# Lightning attributes that are private (a leading underscore) and that this project once used.
PRIVATE_LIGHTNING = re.compile(r"\.(_trainer|_get|_parser|_instantiate_trainer|_subcommand_parsers|"
                               r"_checkpoint_connector|_logger_connector|_results|_accelerator_connector|"
                               r"_run_stage|_data_connector)\b")


def test_no_private_lightning_attribute_is_used():
    """Public hooks and properties only, so the project is not pinned to one Lightning release."""
    used = [f"{name}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0)}"
            for name, text in _tracked_python_sources().items()
            if name != "tests/test_repository.py"
            for m in PRIVATE_LIGHTNING.finditer(text)]
    assert not used
