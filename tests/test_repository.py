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
    ("lit_attention/analysis/effects.py", "none"): "matplotlib's linestyle",
    ("lit_attention/analysis/plots.py", "none"): "matplotlib's linestyle",
    ("lit_attention/tracking/wandb.py", "wandb"): "the wandb package and its run folder",
    ("lit_attention/tracking/run_store.py", "wandb"): "a package whose version a run records",
    ("lit_attention/tracking/run_store.py", "sentencepiece"): "a package whose version a run records",
    **{("lit_attention/data/tokenizers.py", name): "the format tag of a saved vocabulary file (old "
       "files keep theirs whatever the registry calls the tokenizer)" for name in ("word", "char", "sentencepiece")},
    ("lit_attention/data/tokenizers.py", "unigram"): "SentencePiece's own name of its model type",
    **{(f"lit_attention/{path}", "sum"): "torch's reduction"
       for path in ("diagnostics/gradflow.py", "lightning/budget.py", "lightning/totals.py", "metrics.py")},
    ("lit_attention/lightning/lm.py", "none"): "torch's reduction (per-token losses)",
    ("lit_attention/sweep/placement.py", "none"): "a sweep's word for no GPUs",
    ("lit_attention/sweep/schema.py", "none"): "a sweep's word for no pruner",
    ("lit_attention/lightning/base.py", "window"): "the option model.window (a context length), not the family",
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
    local = {Path(name).stem for name in _tracked_python_sources()     # tests', bench's, analysis/'s helpers
             if name.startswith(("tests/", "bench/", "analysis/"))}
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


# -- Each sweep key is written in its field of lit_attention/sweep/schema.py's `Sweep` only -------
# A key of a sweep file is one field (`sweep_key`: key, type, default, help); the tables of keys
# (TOP_KEYS, REQUIRED), the defaults parse_sweep falls back on and docs/SWEEPS.md's table derive
# from the fields, and `lit-attention sweep`'s options override them in one place
# (`Sweep.with_overrides`). Writing a key again, anywhere in lit_attention/, is: a list, tuple, set
# or dict of mostly sweep key names (a second table of keys); reading a key with a default beside
# it (`.get("workers", 1)`; the default is the field's: `.get(k, default("heartbeat.interval"))`);
# putting another value before a sweep's field (`args.root or sweep.root`: an override outside
# `with_overrides`). Allowed, (file, function, what) -> why:
SWEEP_KEY_ALLOWED = {
    ("lit_attention/sweep/schema.py", "spec", "table"):
        "the spec stored in a study: its keys are frozen (the spec hash of existing studies depends on them)",
    ("lit_attention/sweep/schema.py", "parse_sweep", "grace_period"):
        "a default computed from the interval (docs/SWEEPS.md shows it as `3 × interval`)",
}


def sweep_key_writes(source: str, keys: set[str], fields: set[str]) -> list[tuple[int, str, str, str]]:
    """(line, enclosing function, what, code) for each place ``source`` writes a sweep key again
    (``keys``: key names, ``fields``: the `Sweep` attributes they set); what: "table" or the key."""
    import ast

    tree = ast.parse(source)
    function = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                function[inner] = node.name   # walked outer first: the innermost def wins
    hits = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            items = node.keys if isinstance(node, ast.Dict) else node.elts
            strings = [n.value for n in items if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            found = [s for s in strings if s in keys]
            what = "table" if len(found) >= 2 and 2 * len(found) > len(strings) else None
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys):
            fallback = node.args[1]
            from_field = (isinstance(fallback, ast.Call) and isinstance(fallback.func, (ast.Name, ast.Attribute))
                          and ast.unparse(fallback.func).rpartition(".")[2] == "default")
            what = None if from_field else node.args[0].value
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            merged = [v.attr for v in node.values[1:] if isinstance(v, ast.Attribute) and v.attr in fields
                      and ast.unparse(v.value).rpartition(".")[2] == "sweep"]
            what = merged[0] if merged else None
        if what:
            hits.append((node.lineno, function.get(node, ""), what,
                         (ast.get_source_segment(source, node) or "").splitlines()[0][:70]))
    return sorted(set(hits))


def _sweep_key_writes_in_package() -> dict[tuple[str, str, str], list[str]]:
    from lit_attention.sweep import schema
    keys = set(schema.TOP_KEYS) | {part for key in schema.FIELDS for part in (key, key.partition(".")[2]) if part}
    fields = {f.name for f in schema.FIELDS.values()}
    found: dict[tuple[str, str, str], list[str]] = {}
    for path, text in sorted(_tracked_python_sources().items()):
        if path.startswith("lit_attention/"):
            for line, function, what, code in sweep_key_writes(text, keys, fields):
                found.setdefault((path, function, what), []).append(f"{path}:{line}: {code}")
    return found


def test_sweep_keys_are_written_only_in_their_fields():
    """A second list of sweep keys, a default beside a key or an override merged by hand is a copy
    that the next sweep key will not be in: declare the key as a field of `Sweep` and derive."""
    stray = [where for key, places in _sweep_key_writes_in_package().items()
             if key not in SWEEP_KEY_ALLOWED for where in places]
    assert not stray, ("sweep keys written outside their field in lit_attention/sweep/schema.py "
                       "(derive from schema.FIELDS, use schema.default(key), Sweep.with_overrides):\n"
                       + "\n".join(stray))


def test_sweep_key_allow_list_has_no_stale_entry():
    stale = sorted(set(SWEEP_KEY_ALLOWED) - set(_sweep_key_writes_in_package()))
    assert not stale, f"no longer written there: drop from SWEEP_KEY_ALLOWED: {stale}"


def test_the_sweep_key_check_finds_tables_defaults_and_merges():
    keys, fields = {"root", "workers", "tracking", "seeds", "interval"}, {"root", "workers", "tracking"}
    source = "\n".join([
        'TOP = ("root", "workers", "seeds")',                  # 1: a table of keys
        'n = data.get("workers", 1)',                          # 2: a default beside the key
        'root = args.root or sweep.root',                      # 3: an override merged by hand
        'mode = tracking or self.sweep.tracking',              # 4: the same on an attribute
        'i = hb.get("interval", default("heartbeat.interval"))',  # 5: the field's default
        'root = sweep.root or Path(".")',                      # 6: the field first: no override
        'cmd = ["--root", str(root), "--devices", "2"]',       # 7: one key among other strings
        'w = data.get("workers")',                             # 8: no default
        'options = {"interval": int, "grace_period": int}',    # 9: one key: not a table
    ])
    assert [(line, what) for line, _, what, _ in sweep_key_writes(source, keys, fields)] == [
        (1, "table"), (2, "workers"), (3, "root"), (4, "tracking")]


# -- Layers: no import from a lower layer to a higher one, no import circle -----------------------
# docs/ARCHITECTURE.md states the layers in one line; a unit is a folder of lit_attention/ or a
# top-level module. Imports inside functions count (they still make the lower layer know the higher).

def _layers() -> dict[str, int]:
    """docs/ARCHITECTURE.md's layer line: unit -> its layer, 0 the lowest."""
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    lines = re.findall(r"^    ([\w ]+(?: < [\w ]+)+)$", text, re.M)
    assert len(lines) == 1, f"docs/ARCHITECTURE.md must state the layers in one line, found {lines}"
    return {unit: i for i, layer in enumerate(lines[0].split(" < ")) for unit in layer.split()}


def package_imports(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at the top or inside a function, from the files
    ``sources`` (path -> text); `from a import b` counts module a.b when b is one, else a."""
    import ast

    def module(path: str) -> str:
        return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")

    modules = {module(p) for p in sources}
    graph = {}
    for path, text in sources.items():
        me = module(path)
        package = me if path.endswith("__init__.py") else me.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:   # relative: from the package, `level - 1` packages up
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in modules:   # `import a.b.c` of a function or class: its module
                    name = name.rpartition(".")[0]
                if name and name != me:
                    found.add(name)
        graph[me] = found
    return graph


def unit_of(module: str) -> str:
    """lit_attention.sweep.driver -> sweep; lit_attention.cli -> cli; the package itself -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Some circle of imports in ``graph`` (a list that starts and ends at the same node), or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    return next((found for node in sorted(graph) if node not in state and (found := visit(node))), None)


def layer_violations(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """Each import of ``graph`` from a unit to a unit of a higher layer, and each unit not placed."""
    unplaced = sorted({unit_of(m) for m in graph} - set(layers) - {"__init__"})
    up = [f"{m} imports {n}: {unit_of(m)} is below {unit_of(n)}" for m, out in sorted(graph.items())
          for n in sorted(out) if layers.get(unit_of(m), 0) < layers.get(unit_of(n), 0)]
    return [f"{u} has no layer in docs/ARCHITECTURE.md" for u in unplaced] + up


def _package_graph() -> dict[str, set[str]]:
    sources = {p: t for p, t in _tracked_python_sources().items() if p.startswith("lit_attention/")}
    return package_imports(sources)


def test_no_import_goes_up_a_layer():
    graph = _package_graph()
    layers = _layers()
    assert set(layers) - {unit_of(m) for m in graph} == set(), "a layer names a unit the package lacks"
    assert not layer_violations(graph, layers), "\n".join(layer_violations(graph, layers))


def test_no_modules_or_folders_import_each_other():
    graph = _package_graph()
    assert a_cycle(graph) is None, f"an import circle: {' -> '.join(a_cycle(graph))}"
    units = {}
    for m, out in graph.items():
        units.setdefault(unit_of(m), set()).update(unit_of(n) for n in out if unit_of(n) != unit_of(m))
    assert a_cycle(units) is None, f"folders that import each other: {' -> '.join(a_cycle(units))}"


def test_the_import_checks_find_the_circle_and_the_upward_imports_they_were_written_for():
    """A circle cli.py -> sweep/cli.py -> sweep/driver.py -> cli.py, and tracking/callback.py
    importing lightning/ while lightning/diagnostics.py imports tracking/."""
    sources = {
        "lit_attention/cli.py": "def main():\n    from lit_attention.sweep.cli import main\n",
        "lit_attention/sweep/__init__.py": "",
        "lit_attention/sweep/cli.py": "from lit_attention.sweep import driver\n",
        "lit_attention/sweep/driver.py": "def check():\n    from lit_attention.cli import check_training_args\n",
        "lit_attention/tracking/callback.py": "from lit_attention.lightning.budget import TrainingBudget\n",
        "lit_attention/lightning/budget.py": "import torch\n",
        "lit_attention/lightning/diagnostics.py": "from lit_attention.tracking import callback\n",
    }
    graph = package_imports(sources)
    assert graph["lit_attention.sweep.cli"] == {"lit_attention.sweep.driver"}
    assert a_cycle(graph) == ["lit_attention.cli", "lit_attention.sweep.cli", "lit_attention.sweep.driver",
                              "lit_attention.cli"]
    layers = {"lightning": 0, "tracking": 1, "sweep": 2, "cli": 3}
    assert layer_violations(graph, layers) == [
        "lit_attention.lightning.diagnostics imports lit_attention.tracking.callback: lightning is below tracking",
        "lit_attention.sweep.driver imports lit_attention.cli: sweep is below cli"]
    assert layer_violations(graph, {"lightning": 0}) == [
        "cli has no layer in docs/ARCHITECTURE.md", "sweep has no layer in docs/ARCHITECTURE.md",
        "tracking has no layer in docs/ARCHITECTURE.md"]
