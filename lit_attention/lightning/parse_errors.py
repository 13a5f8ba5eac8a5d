"""jsonargparse's parse errors (often 60+ lines) as one line that names the option, the value and
the nearest valid option: what `lit-attention fit|validate|test` prints for a bad argument."""

from __future__ import annotations

import importlib
import inspect
import re
from itertools import islice, takewhile

from lit_attention.config_check import suggest, unknown_option
from lit_attention.files import shown


def class_path_problem(text: str, n: int = 3, width: int = 300) -> str | None:
    """Of a union error, the complaint of the class its ``class_path`` names (a missing package, a
    required argument), as "package.Class: complaint": that class is what was meant, not the
    union's other members (a list, a bool). None when no class_path was refused."""
    if not (found := re.search(r"(?m)^( *)- Problem with given class_path '([\w.]+)':.*", text)):
        return None
    indent = len(found.group(1)) + 2   # the complaint's lines are indented deeper than its head
    nested = takewhile(lambda line: len(line) - len(line.lstrip()) > indent,
                       text[found.end():].splitlines()[1:])
    cause = [line.strip()[:width] for line in islice(nested, n)]
    return f"{found.group(2)}: " + "\n  ".join(cause) if cause else None


def first_lines(text: str, n: int = 3, width: int = 300) -> str:
    """At most n lines of an error; of jsonargparse's union errors only the one that matters."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if problem := class_path_problem(text, n, width):
        return problem
    if "Does not validate against any of the Union subtypes" in text:
        causes = [line[2:] for line in lines if line.startswith("- ") and "NoneType" not in line]
        lines = [c for c in causes if not c.startswith("Problem with given class_path")] or causes or lines
    return "\n  ".join(line[:width] for line in lines[:n])


def class_at(class_path: str) -> type:
    """The class a config's ``class_path`` ("package.module.Class") names, imported now."""
    module, _, name = class_path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _reason(text: str) -> str:
    """jsonargparse's `Expected a <class 'int'>. Got value: abc` as `expected int, got 'abc'`."""
    text = text.strip()
    if m := re.match(r"Expected a typing\.Literal\[(.*)\]\. Got value: (.*)", text):
        valid = ", ".join(v.strip().strip("'\"") for v in m.group(1).split(","))
        return f"{shown(m.group(2))!r} is not one of: {valid}"
    if m := re.match(r"Expected a <class '(\w+)'>\. Got value: (.*)", text):
        return f"expected {m.group(1)}, got {shown(m.group(2))!r}"
    return shown(text, 300)


def short_parse_error(message: str, parsers: list) -> str:
    """A jsonargparse error (often 60+ lines) as one line naming the option and the nearest valid one."""
    group = re.search(r'Parser key "(\w+)":', message)
    class_path = re.search(r"class_path '([\w.]+)'", message)
    if group and class_path:  # model.* or data.*: checked against the class's __init__
        prefix = group.group(1) + "."
        if option := re.search(r"Option '(\w+)' is not accepted", message):
            arguments = inspect.signature(class_at(class_path.group(1)).__init__).parameters
            valid = [prefix + p for p in arguments if p != "self"]
            return str(unknown_option(prefix + option.group(1), valid))
        if field := re.search(r"class_path [^\n]*\n\s*Parser key \"(\w+)\":\s*(.*?)\n", message):
            reason = field.group(2)
            nested = message[field.end():]
            wanted = re.search(r"- (Expected a (?!<class 'NoneType'>)[^\n]*)", nested)
            given = re.search(r"Given value: (.*)", nested)
            if "Union subtypes" in reason and wanted and given:   # Optional[X]: what X wants
                reason = f"{wanted.group(1)}. Got value: {given.group(1)}"
            return f"invalid value for {prefix}{field.group(1)}: {_reason(reason)}"
    if unknown := (re.search(r"does not accept option '([\w.]+)'", message)
                   or re.search(r"unrecognized arguments: --([^\s=]+)", message)):
        name = unknown.group(1)
        valid = sorted({k for p in parsers for k in p.get_defaults().keys()})
        head, dot, rest = name.partition(".")
        groups = sorted({k.partition(".")[0] for k in valid})
        # a misspelt group (`modle.d_model`): the group's options are not all in ``valid``
        if dot and head not in groups and (near := suggest(head, groups)):
            return f"unknown option {name} — did you mean {near}.{rest}?"
        return str(unknown_option(name, valid))
    single = re.match(r'Parser key "([\w.]+)":\s*(.*)', message)
    if single and not re.search(r"^\s*- ", message, re.M):   # one type: its one complaint (maybe on the next line)
        return f"invalid value for {single.group(1)}: {_reason(single.group(2))}"
    if single and (problem := class_path_problem(message, 1)):
        return f"invalid value for {single.group(1)}: {problem}"
    if single:   # a union (int | None, or several literals): every alternative's complaint
        given = re.search(r"Given value: (.*)", message)
        value = shown(given.group(1)) if given else "?"
        causes = [line.strip()[2:] for line in message.splitlines()
                  if line.strip().startswith("- ") and "NoneType" not in line]
        reasons = [_reason(f"{c}. Got value: {value}") if c.startswith("Expected a") and "Got value" not in c
                   else _reason(c) for c in causes] or [first_lines(message, 1)]
        if len(reasons) > 1:
            types = [r[len("expected "):].partition(",")[0] for r in reasons if r.startswith("expected ")]
            words = [r.replace(f"{value!r} is not one of: ", "") for r in reasons if not r.startswith("expected ")]
            wanted = ", ".join(words + [f"a value of type {t}" for t in types])
            return f"invalid value for {single.group(1)}: {value!r}; expected one of: {wanted}"[:600]
        return f"invalid value for {single.group(1)}: {reasons[0]}"
    return first_lines(message)
