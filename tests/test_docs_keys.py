"""docs/ARCHITECTURE.md's config key list is the one the code generates."""

from typing import Literal, Optional

import docs_keys
from lit_attention import registry


def test_architecture_md_lists_the_config_keys_of_the_code():
    documented = docs_keys.section(docs_keys.DOC.read_text(encoding="utf-8"))
    assert documented is not None, f"{docs_keys.DOC} lost its generated section"
    assert documented == docs_keys.generated(), (
        f"{docs_keys.DOC}'s config key list differs from the code (a constructor argument, run "
        f"option or registry choice was added, renamed or changed): run `{docs_keys.COMMAND}`")


class _Model:
    def __init__(self, family: Literal[registry.FAMILIES] = "rnn", d_model: int = 8,
                 scoring: Optional[Literal[tuple(registry.SCORING)]] = None):
        pass


class _Data:
    def __init__(self, task: str = "copy", data_dir: Optional[str] = None, joint: bool = True):
        pass


def test_a_new_or_renamed_key_changes_the_list():
    rows = docs_keys.class_rows(_Model, "model", "seq2seq") + docs_keys.class_rows(_Data, "data", "seq2seq")
    assert rows == [
        "| `model.family` | `rnn` | transformer, rnn |",
        "| `model.d_model` | `8` | int |",
        "| `model.scoring` | `null` | dot, scaled_dot, general, low_rank, additive, concat or null |",
        "| `data.task` | `copy` | copy, reverse, sort, toy-mt, files |",
        "| `data.data_dir` | `null` | str or null |",
        "| `data.joint` | `true` | bool |",
    ]
    section = docs_keys.generated({"seq2seq": {"model": _Model, "data": _Data}})
    assert "`model.d_model`" in section and "`data.joint`" in section
    assert section != docs_keys.generated()


def test_check_and_write(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "ARCHITECTURE.md"
    doc.write_text(f"# title\n\n{docs_keys.BEGIN}\n| `model.old_name` | ... |\n{docs_keys.END}\n\nrest\n")
    monkeypatch.setattr(docs_keys, "DOC", doc)
    assert docs_keys.main(["--check"]) == 1
    assert docs_keys.COMMAND in capsys.readouterr().err
    assert docs_keys.main(["--write"]) == 0
    assert docs_keys.main(["--check"]) == 0
    text = doc.read_text()
    assert text.startswith("# title\n\n") and text.endswith("\n\nrest\n") and "old_name" not in text
    assert docs_keys.main([]) == 2
