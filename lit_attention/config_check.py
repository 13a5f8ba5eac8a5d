"""The one strict-key check: an unknown option stops the program with the nearest valid name.

Used by the model factories, the training CLI (on jsonargparse's errors) and, through the CLI's
parser, by the sweep driver. Messages are short: one line naming the option and a suggestion.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable, NamedTuple

from lit_attention.registry import RENAMED

SEED_RANGE = (0, 2 ** 32 - 1)   # the seeds seed_everything (numpy's generator) and Optuna's samplers take

# Names other toolkits use for our options (PyTorch, Hugging Face, fairseq): a hint only, offered
# when its target is one of the valid names at hand. Our own former names are registry.RENAMED.
SYNONYMS = {
    **{old: (new,) for old, new in RENAMED.items()},
    "hidden_dim": ("d_model",), "dim": ("d_model",), "embed_dim": ("emb_size",),
    "embedding_size": ("emb_size",), "emb_dim": ("emb_size",),
    "num_heads": ("heads",), "n_heads": ("heads",), "nhead": ("heads",),
    "num_layers": ("layers", "enc_layers"), "n_layers": ("layers", "enc_layers"),
    "dim_feedforward": ("ffn",), "ffn_dim": ("ffn",), "d_ff": ("ffn",),
    "learning_rate": ("lr",), "beam": ("beam_size",), "epochs": ("max_epochs",),
    "seed": ("seed_everything",),
}


class Inert(NamedTuple):
    """Why a setting has no effect on a module (model or data), and the values that are still no
    request: besides its default, e.g. 0 for a diagnostic that a sweep's shared base switches off
    for every arm. A module's ``inert_settings`` lists them; `fit` refuses a request for one."""
    reason: str
    harmless: tuple[Any, ...] = ()


class ConfigError(ValueError):
    """A key or value the program cannot honour. ``str(err)`` is the whole message (≤ 5 lines)."""

    exit_code = 2


def suggest(name: str, valid: Iterable[str]) -> str | None:
    """The valid name closest to ``name`` (difflib, or a known synonym), or None."""
    valid = list(dict.fromkeys(valid))
    head, dot, last = name.rpartition(".")
    prefix = head + dot

    def synonym_target(word: str) -> str | None:
        return next((prefix + t for t in SYNONYMS.get(word, ()) if prefix + t in valid), None)

    if found := synonym_target(last):
        return found
    # Compare the last part among names of the same group ("model." matches itself otherwise).
    siblings = [v.rpartition(".")[2] for v in valid if v.rpartition(".")[0] == head]
    if siblings:
        words = siblings + [s for s in SYNONYMS if synonym_target(s)]
        for close in difflib.get_close_matches(last, words, n=1, cutoff=0.6):
            return prefix + close if close in siblings else synonym_target(close)
        return None
    return next(iter(difflib.get_close_matches(name, valid, n=1, cutoff=0.6)), None)


def unknown_option(name: str, valid: Iterable[str], what: str = "option") -> ConfigError:
    """``unknown option model.hiden_size — did you mean model.d_model?`` (a former name of ours:
    ``... — did you mean model.d_model? (renamed: docs/CONFIG.md)``)."""
    near = suggest(name, valid)
    hint = f" — did you mean {near}?" if near else ""
    if near and near.rpartition(".")[2] == RENAMED.get(name.rpartition(".")[2]):
        hint += " (renamed: docs/CONFIG.md)"
    return ConfigError(f"unknown {what} {name}{hint}")
