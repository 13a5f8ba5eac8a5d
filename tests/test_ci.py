"""CI's lower-bounds step: the constraints .ci/lower_bounds.py derives from pyproject.toml pin every
declared dependency at its floor (torch at the CPU build .ci/run's test command installs), and
requires-python is what those floors need."""

import re
import subprocess
import sys
import tomllib

from conftest import REPO


def test_the_constraints_pin_every_declared_floor_and_torch_at_the_ci_build():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = subprocess.run([sys.executable, REPO / ".ci" / "lower_bounds.py"], capture_output=True, text=True,
                         check=True).stdout
    pins = dict(line.split("==") for line in out.split())
    declared = project["dependencies"] + [r for group in project["optional-dependencies"].values() for r in group]
    for requirement in declared:
        name, floor = re.fullmatch(r"([\w.-]+)(?:\[.*\])?>=(.+)", requirement).groups()
        if name != "torch":
            assert pins.pop(name) == floor, requirement
    ci = (REPO / ".ci" / "run").read_text()
    assert f"torch=={pins.pop('torch')} " in ci and pins == {}
    assert '.ci/lower_bounds.py > "$floors"' in ci and '-m "not slow"' in ci


def test_requires_python_is_what_the_floors_need():
    # pandas 3.1, numpy 2.4 and matplotlib 3.11 publish no wheels for Python 3.10
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"] == ">=3.11"


def test_a_requirement_without_a_plain_floor_is_one_line(tmp_path):
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "lower_bounds.py").write_text((REPO / ".ci" / "lower_bounds.py").read_text())
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["numpy<3"]\n')
    out = subprocess.run([sys.executable, tmp_path / ".ci" / "lower_bounds.py"], capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr == "lower_bounds: 'numpy<3' has no plain `>=` floor to pin\n"
