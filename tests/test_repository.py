"""Repository-wide rules that a grep can check."""

import re
import subprocess
from pathlib import Path

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


# -- Choice names are spelled in lit_attention/registry.py only ----------------------------------
# A registry choice name (the name of a row of a registry table, or a value of a key of
# registry.CONFIG_CHOICES) written as a string constant anywhere in lit_attention/ outside the
# registry is a second copy of a registry fact: a branch on the name, a table keyed by it, a
# default, a call that picks it. Code asks the registry's rows instead (a row's impl and
# properties). Not counted: docstrings and the literal text of f-strings (messages, docs).
# Allowed, (file, name) -> why, are only strings that are not the choice but the same word:
CHOICE_LITERAL_ALLOWED = {
    ("lit_attention/analysis/effects_output.py", "none"): "matplotlib's linestyle",
    ("lit_attention/analysis/plots.py", "none"): "matplotlib's linestyle",
    ("lit_attention/analysis/wandb_export.py", "wandb"): "the wandb package's command line",
    ("lit_attention/tracking/wandb.py", "wandb"): "the wandb package and its run folder",
    ("lit_attention/tracking/run_store.py", "wandb"): "a package whose version a run records",
    ("lit_attention/tracking/run_store.py", "sentencepiece"): "a package whose version a run records",
    **{("lit_attention/data/tokenizers.py", name): "the format tag of a saved vocabulary file (old "
       "files keep theirs whatever the registry calls the tokenizer)" for name in ("word", "char", "sentencepiece")},
    ("lit_attention/data/tokenizers.py", "unigram"): "SentencePiece's own name of its model type",
    **{(f"lit_attention/{path}", "sum"): "torch's reduction"
       for path in ("diagnostics/gradflow.py", "lightning/budget.py", "lightning/totals.py", "metrics.py")},
    ("lit_attention/sweep/placement.py", "none"): "a sweep's word for no GPUs",
    ("lit_attention/sweep/schema.py", "none"): "a sweep's word for no pruner",
}


def _choice_names() -> set[str]:
    from lit_attention import registry
    tables = [t for t in vars(registry).values()
              if isinstance(t, dict) and t and all(isinstance(r, registry.Choice) for r in t.values())]
    return ({name for t in tables for name in t}
            | {v for keys in registry.CONFIG_CHOICES.values() for values in keys.values() for v in values})


def choice_literals(source: str, names: set[str]) -> list[tuple[int, str, str]]:
    """(line, choice name, the line's code) for each string constant of ``source`` that is a
    choice name, docstrings and the literal text of f-strings left out."""
    import ast

    tree = ast.parse(source)
    prose = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)):
            prose.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            prose |= {id(v) for v in node.values if isinstance(v, ast.Constant)}
    lines = source.splitlines()
    return sorted({(n.lineno, n.value, lines[n.lineno - 1].strip()) for n in ast.walk(tree)
                   if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names
                   and id(n) not in prose})


def _choice_literals_in_package() -> dict[tuple[str, str], list[str]]:
    """(file, name) -> ["file:line: code", ...] over lit_attention/ outside the registry."""
    names = _choice_names()
    found: dict[tuple[str, str], list[str]] = {}
    for path, text in sorted(_tracked_python_sources().items()):
        if not path.startswith("lit_attention/") or path == "lit_attention/registry.py":
            continue
        for line, name, code in choice_literals(text, names):
            found.setdefault((path, name), []).append(f"{path}:{line}: {name!r} in {code[:80]}")
    return found


def test_choice_names_are_spelled_only_in_the_registry():
    """A choice name outside lit_attention/registry.py is a copy of the registry that the next
    renamed or added choice will not be in: read the registry's rows instead."""
    stray = [where for key, places in _choice_literals_in_package().items()
             if key not in CHOICE_LITERAL_ALLOWED for where in places]
    assert not stray, ("registry choice names spelled outside lit_attention/registry.py (ask the "
                       "registry's rows: impl, properties, CONFIG_DEFAULTS):\n" + "\n".join(stray))


def test_choice_allow_list_has_no_stale_entry():
    stale = sorted(set(CHOICE_LITERAL_ALLOWED) - set(_choice_literals_in_package()))
    assert not stale, f"no longer spelled there: drop from CHOICE_LITERAL_ALLOWED: {stale}"


def test_the_choice_literal_check_finds_every_spelling_but_prose():
    names = {"rnn", "transformer", "none", "wandb", "lstm", "gru"}
    source = "\n".join([
        '"""A module about rnn."""',                      # 1: a docstring
        'if family == "rnn": pass',                        # 2: a branch
        'ok = tracking in ("none", "wandb")',              # 3: a tuple in a comparison
        'table = {"lstm": 1, "gru": 2}',                   # 4: a dispatch table
        'def f(family="transformer"):',                    # 5: a default
        '    """About gru."""',                            # 6: a docstring
        '    return build("gru", f"the {family} and rnn")',  # 7: a call; an f-string's text is prose
        'print("none of these")',                          # 8: a message
    ])
    hits = {(line, name) for line, name, _ in choice_literals(source, names)}
    assert hits == {(2, "rnn"), (3, "none"), (3, "wandb"), (4, "lstm"), (4, "gru"), (5, "transformer"),
                    (7, "gru")}


def _layout_entries() -> dict[str, str]:
    """docs/ARCHITECTURE.md's lit_attention/ layout: entry ("models/", "cli.py") -> its text."""
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = text[text.index("```\nlit_attention/\n") + len("```\nlit_attention/\n"):]
    entries, name = {}, None
    for line in block.splitlines():
        if not line.startswith(" "):      # the next top-level folder: the package's layout ends
            break
        if not line.startswith("   "):    # "  name   what it is"
            name = line.split()[0]
            entries[name] = ""
        entries[name] += " " + line.strip()
    return entries


def test_the_architecture_layout_names_every_module():
    """A module added under lit_attention/ without a word in docs/ARCHITECTURE.md fails here."""
    entries = _layout_entries()
    missing = []
    for path in sorted((REPO / "lit_attention").rglob("*.py")):
        parts = path.relative_to(REPO / "lit_attention").parts
        if parts[-1] == "__init__.py" and len(parts) > 1:
            continue
        entry = parts[0] if len(parts) == 1 else parts[0] + "/"
        words = re.findall(r"[\w./-]+", entries.get(entry, ""))
        if len(parts) > 1 and not (parts[-1] in words and all(f"{d}/" in words for d in parts[1:-1])):
            missing.append("/".join(parts))
        elif len(parts) == 1 and entry not in entries and parts[0] != "__init__.py":
            missing.append(parts[0])
    assert not missing, f"docs/ARCHITECTURE.md's layout does not name: {', '.join(missing)}"


# Distributions the code needs without importing them by name: pandas' DataFrame.to_markdown
# imports tabulate (the report's table.md).
NEEDED_BY_CALL = {"tabulate": ".to_markdown("}
# Peer toolkits a benchmark drives in a venv of its own (../shared/STACK-NOTES.md), never ours.
PEER_TOOLKITS = {"joeynmt"}


def _imported_distributions(folders: list[str]) -> set[str]:
    """The distributions (normalised names) whose modules the tracked files under ``folders``
    import, at the top or inside a function, plus those NEEDED_BY_CALL by a call they make."""
    import ast
    import importlib.metadata
    import sys

    owner = importlib.metadata.packages_distributions()
    local = {Path(name).stem for name in _tracked_python_sources()     # tests' and bench's helpers
             if name.startswith(("tests/", "bench/"))}
    found = set()
    for name, text in _tracked_python_sources().items():
        if not name.startswith(tuple(f"{f}/" for f in folders)):
            continue
        for node in ast.walk(ast.parse(text)):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names | local | PEER_TOOLKITS and top != "lit_attention":
                    assert top in owner, f"{name} imports {top}, which no installed distribution provides"
                    found.update(owner[top])
        found.update(dist for dist, call in NEEDED_BY_CALL.items() if call in text)
    return {_normalised(d) for d in found}


def _normalised(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_declared_dependencies_are_exactly_what_the_code_imports():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_normalised(r) for r in project["dependencies"]}
    assert declared == _imported_distributions(["lit_attention", "analysis"])
    extras = {_normalised(r) for group in project["optional-dependencies"].values() for r in group}
    # the tests and benchmarks need nothing beyond the dependencies and the extras
    missing = _imported_distributions(["tests", "bench"]) - declared - extras
    assert missing == set()
