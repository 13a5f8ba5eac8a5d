"""Files the way every layer needs them: written atomically with the user's umask, and a
user-written YAML file read strictly (the one reader of fit configs and sweep files)."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Any

import yaml

from lit_attention.config_check import ConfigError


def atomic_write(path: Path | str, data: str | bytes) -> None:
    """Write ``data`` to ``path`` so that a reader never sees a partial file (temp file + rename).

    The temp file is created like any other file (mode 0666 minus the umask), not with
    tempfile.mkstemp's 0600, so that what the suite writes is as readable as the user intends.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        with open(tmp, "xb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def check_writable(directory: Path) -> None:
    """Create `directory` and a 4 KiB file in it, then remove the file: OSError (naming the path)
    if the file system refuses (read-only, full, no permission)."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".write-test-{os.getpid()}"
    try:
        with open(probe, "wb", buffering=0) as f:   # unbuffered: fsync then syncs all of it
            f.write(b"x" * 4096)
            os.fsync(f.fileno())
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)


# Bounds of a user-written YAML file (a training config, a sweep file): far above any real one,
# far below what makes reading it slow. An alias bomb is a few lines that expand to billions of
# nodes; a deep nesting overflows the recursive composer.
MAX_YAML_BYTES = 1 << 18
MAX_YAML_NODES = 20_000
MAX_YAML_DEPTH = 64
MAX_SHOWN = 120   # characters of a value quoted in a message


class FileError(ConfigError):
    """A user-written file the program refuses: ``FILE:LINE: KEY: what``, one line (a usage
    error, as any ConfigError)."""

    def __init__(self, file: str | Path, key: str, message: str, line: int | None = None):
        self.file, self.key, self.line, self.reason = str(file), key, line, message
        where = f"{file}:{line}" if line else str(file)
        super().__init__(f"{where}: {key}: {message}")


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """``value`` on one line, cut to ``limit`` characters with its full size said."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)   # libyaml when installed


def read_yaml(source: Path | str, where: str | Path | None = None,
              mapping: bool = True) -> tuple[Any, dict[str, int]]:
    """The document of a user-written YAML file and the line of each key (``{"space.model.lr": 12}``,
    ``{"space.base.choices[1]": 9}``); ``source`` is the file's path, or its text named ``where``.

    Raises FileError (naming the file, line and key) at what PyYAML would take silently or slowly:
    a key given twice in one mapping (PyYAML keeps the last), more than MAX_YAML_NODES nodes once
    aliases are expanded, nesting deeper than MAX_YAML_DEPTH, more than MAX_YAML_BYTES, text that
    is not UTF-8, more than one document; and at invalid YAML, a tag the safe loader refuses, and
    (``mapping``) a document that is no mapping of keys.
    """
    if isinstance(source, Path):
        where = where or source
        try:
            with open(source, "rb") as f:
                source = f.read(MAX_YAML_BYTES + 1)
        except FileNotFoundError:
            raise FileError(where, "(file)", "not found") from None
        except OSError as e:
            raise FileError(where, "(file)", f"cannot read: {e.strerror or e}") from None
    where = where or "(text)"
    if len(source) > MAX_YAML_BYTES:
        unit = "bytes" if isinstance(source, bytes) else "characters"
        raise FileError(where, "(file)", f"more than {MAX_YAML_BYTES:,} {unit}: not a config file")
    try:
        text = source.decode("utf-8") if isinstance(source, bytes) else source
    except UnicodeDecodeError as e:
        raise FileError(where, "(file)", f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    loader = _Loader(text)
    lines: dict[str, int] = {}
    try:
        if (node := loader.get_single_node()) is not None:
            _walk(node, "", lines, where, {}, 0)
        document = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = " ".join(filter(None, (getattr(e, "context", None), getattr(e, "problem", None)))) or str(e)
        raise FileError(where, "(yaml)", f"not valid YAML: {shown(problem)}",
                        mark.line + 1 if mark else None) from None
    except RecursionError:
        raise FileError(where, "(yaml)", f"nested more than {MAX_YAML_DEPTH} levels deep") from None
    finally:
        loader.dispose()
    if mapping and not isinstance(document, dict):
        what = "an empty document" if document is None else f"a {type(document).__name__}"
        raise FileError(where, "(top level)", f"must be a mapping of keys, got {what}",
                        node.start_mark.line + 1 if node is not None else None)
    return document, lines


def _walk(node, path: str, lines: dict[str, int], file, sizes: dict[int, int], depth: int) -> int:
    """Record ``lines[dotted key] = line``, refuse duplicate keys and deep nesting; the node's
    expanded size."""
    if id(node) in sizes:   # an alias: counted again (that is what expanding it costs), walked once
        return sizes[id(node)]
    line = node.start_mark.line + 1
    if depth > MAX_YAML_DEPTH:
        raise FileError(file, path or "(file)", f"nested more than {MAX_YAML_DEPTH} levels deep", line)
    size = sizes[id(node)] = 1
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                size += _walk(value_node, path, lines, file, sizes, depth + 1)
                continue
            key = shown(key_node.value if isinstance(key_node, yaml.ScalarNode) else f"({key_node.id})")
            dotted = f"{path}.{key}" if path else key
            key_line = key_node.start_mark.line + 1
            if key in seen:
                raise FileError(file, dotted, f"duplicate key (first at line {seen[key]})", key_line)
            seen[key] = key_line
            lines.setdefault(dotted, key_line)
            size += _walk(value_node, dotted, lines, file, sizes, depth + 1)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):   # items' lines too: `space.base.choices[1]`
            lines.setdefault(f"{path}[{i}]", item.start_mark.line + 1)
            size += _walk(item, path, lines, file, sizes, depth + 1)
    sizes[id(node)] = size
    if size > MAX_YAML_NODES:
        raise FileError(file, path or "(file)", f"more than {MAX_YAML_NODES:,} YAML nodes once aliases "
                                                "are expanded (an alias bomb?)", line)
    return size
