"""Print pip constraints that hold every dependency pyproject.toml declares at its floor.

`name>=floor` becomes `name==floor` for the dependencies and every optional group, so that one
install of them proves the floors work together. torch is the exception: its floor is the GPU
image's CUDA build, and CI installs the CPU build the test command pins (TORCH below). A
requirement this script cannot read stops it, naming the requirement.

Usage: python3 .ci/lower_bounds.py > constraints.txt
"""

import re
import sys
import tomllib
from pathlib import Path

TORCH = "2.13.0"   # the CPU build .ci/run's test command installs
REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?>=([0-9][0-9A-Za-z.]*)$")


def constraints(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    required = list(project["dependencies"])
    for group in project.get("optional-dependencies", {}).values():
        required += group
    lines = []
    for text in required:
        found = REQUIREMENT.match(text.replace(" ", ""))
        if not found:
            sys.exit(f"lower_bounds: {text!r} has no plain `>=` floor to pin")
        name, _, floor = found.groups()
        lines.append(f"{name}=={TORCH if name.lower() == 'torch' else floor}")
    return lines


if __name__ == "__main__":
    print("\n".join(constraints(Path(__file__).resolve().parent.parent / "pyproject.toml")))
