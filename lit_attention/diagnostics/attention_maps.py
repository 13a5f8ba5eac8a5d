"""Attention diagnostics: entropy per head and heat-map pictures (with their data beside them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch

DPI = 100
CELL_PX = 40          # one source/target token
MARGIN_PX = 200       # per axis: 150 before the grid (labels, title) and 50 after it
LABEL_PX = 150


def attention_entropy(weights: torch.Tensor, src_pad: torch.Tensor,
                      tgt_pad: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) per head [H] of attention weights [B, H, T, S].

    Keys where src_pad [B, S] is True are left out (0 log 0 = 0 for any weight left there);
    the mean runs over the query rows where tgt_pad [B, T] is False. Uniform attention over
    m keys has entropy log m.
    """
    w = weights.detach().double().masked_fill(src_pad[:, None, None, :], 0.0)
    entropy = -torch.xlogy(w, w).sum(dim=-1)                        # [B, H, T]
    valid = (~tgt_pad)[:, None, :].double()                         # [B, 1, T]
    return (entropy * valid).sum(dim=(0, 2)) / valid.sum(dim=(0, 2)).clamp(min=1.0)


def entropy_by_name(attention: dict[str, torch.Tensor], src_pad: torch.Tensor,
                    tgt_pad: torch.Tensor) -> dict[str, list[float]]:
    """`attention_entropy` per head for a model's named weights (Seq2SeqOutput.attention).

    The name's first part says which side the queries and keys come from: ``enc_self[.i]`` source
    over source, ``dec_self[.i]`` target over target, anything else (``cross.*``, ``cross``) target
    over source.
    """
    sides = {"enc_self": (src_pad, src_pad), "dec_self": (tgt_pad, tgt_pad)}   # (keys, queries)
    cross = (src_pad, tgt_pad)
    return {name: attention_entropy(weights, *sides.get(name.partition(".")[0], cross)).tolist()
            for name, weights in attention.items()}


def last_layer(names, prefix: str) -> str | None:
    """The deepest ``<prefix>.<i>`` (or plain ``<prefix>``) among names, by layer number."""
    layers = [n for n in names if n == prefix or n.startswith(prefix + ".")]
    return max(layers, key=lambda n: int(n.rpartition(".")[2]) if "." in n else -1, default=None)


def heatmap_size(n_src: int, n_tgt: int) -> tuple[int, int]:
    """(width, height) in pixels of `save_heatmap`'s PNG: 200 + 40 * tokens on each axis."""
    return MARGIN_PX + CELL_PX * n_src, MARGIN_PX + CELL_PX * n_tgt


def save_heatmap(weights: torch.Tensor, src_tokens: Sequence[str], tgt_tokens: Sequence[str],
                 path: str | Path, title: str | None = None) -> Path:
    """Save attention weights [T, S] as a PNG: source pieces on x (top), target pieces on y.

    The size is fixed by the token counts (see `heatmap_size`), so pictures of different
    sentences keep the same cell size. Beside it, `<path>.json` holds the tokens and the weights
    (4 decimals), from which the report draws the maps at paper size.
    """
    # A bare Figure (savefig draws its PNG with Agg): no pyplot, no global backend or registry.
    from matplotlib.figure import Figure

    w = weights.detach().float().cpu().numpy()
    if w.shape != (len(tgt_tokens), len(src_tokens)):
        raise ValueError(f"weights {w.shape} do not match {len(tgt_tokens)} target and "
                         f"{len(src_tokens)} source tokens")
    width, height = heatmap_size(len(src_tokens), len(tgt_tokens))
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI)
    # the grid fills the figure less its margins: CELL_PX a token
    ax = fig.add_axes((LABEL_PX / width, (MARGIN_PX - LABEL_PX) / height,
                       1 - MARGIN_PX / width, 1 - MARGIN_PX / height))
    ax.imshow(w, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(src_tokens)), labels=list(src_tokens), rotation=90, fontsize=8)
    ax.set_yticks(range(len(tgt_tokens)), labels=list(tgt_tokens), fontsize=8)
    ax.xaxis.tick_top()
    if title:
        fig.suptitle(title, fontsize=9, y=0.995, va="top")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    data = dict(source=list(src_tokens), target=list(tgt_tokens), title=title,
                weights=[[round(float(x), 4) for x in row] for row in w])
    path.with_suffix(".json").write_text(json.dumps(data, ensure_ascii=False))
    return path
