"""What made a run: the training code's fingerprint and the machine it ran on.

The fingerprint covers the modules that decide what training computes (TRAINING_CODE) and not the
ones that only check input, record runs or print, so that a new refusal or a comment does not age
every committed result. It hashes each module's syntax tree without docstrings, so a change of
formatting, comments or docstrings leaves it as it is, and a change of any statement moves it.
"""

from __future__ import annotations

import ast
import hashlib
import platform
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]

# Paths under lit_attention/: folders count whole except the files named in NOT_TRAINING.
TRAINING_CODE = ("models", "data", "decoding", "lightning", "registry.py", "metrics.py")
NOT_TRAINING = ("lightning/cli.py", "lightning/parse_errors.py", "lightning/run_store_callback.py",
                "lightning/process_group.py")


def training_modules(package: Path = PACKAGE) -> list[Path]:
    files = []
    for part in TRAINING_CODE:
        path = package / part
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return [f for f in files if f.relative_to(package).as_posix() not in NOT_TRAINING]


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def code_fingerprint(package: Path = PACKAGE) -> str:
    """sha256 (16 hex digits) over the training modules' paths and docstring-free syntax trees."""
    digest = hashlib.sha256()
    for path in training_modules(package):
        tree = _without_docstrings(ast.parse(path.read_text(encoding="utf-8")))
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(ast.dump(tree, include_attributes=False).encode() + b"\0")
    return digest.hexdigest()[:16]


def machine() -> str:
    """The CPU's model name, torch's kernel set and the core count: "AMD EPYC (AVX512), 2 cores"."""
    import torch

    from lit_attention.threads import allowed_cores
    from lit_attention.tracking.machine_speed import cpuinfo

    name = next(iter(cpuinfo("model name")), None) or platform.processor() or platform.machine()
    return f"{name} ({torch.backends.cpu.get_cpu_capability()}), {allowed_cores()} cores"
