import json
import math
import struct

import pytest
import torch

from lit_attention.data.vocab import PAD
from lit_attention.diagnostics import (attention_entropy, entropy_by_name, heatmap_size, last_layer,
                                       save_heatmap)
from lit_attention.models import build_seq2seq


def test_entropy_of_uniform_attention_is_log_of_key_count():
    B, H, T, S = 2, 3, 4, 5
    weights = torch.full((B, H, T, S), 1 / S)
    no_pad = torch.zeros(B, S, dtype=torch.bool)
    entropy = attention_entropy(weights, no_pad, torch.zeros(B, T, dtype=torch.bool))
    assert entropy.shape == (H,)
    assert torch.allclose(entropy, torch.full((H,), math.log(S), dtype=torch.float64))


def test_entropy_skips_padding_and_averages_valid_rows():
    weights = torch.zeros(1, 2, 3, 4)
    weights[0, 0] = torch.tensor([0.5, 0.5, 0.0, 0.0])            # head 0: two keys, uniform
    weights[0, 1, :, 0] = 1.0                                       # head 1: one-hot
    weights[0, :, 2] = 0.25                                         # padded query row: ignored
    src_pad = torch.tensor([[False, False, True, True]])
    tgt_pad = torch.tensor([[False, False, True]])
    entropy = attention_entropy(weights, src_pad, tgt_pad)
    assert entropy.tolist() == pytest.approx([math.log(2), 0.0])


def uniform_over(valid_keys, n_queries, heads=2):
    """[B, heads, n_queries, S]: every query row uniform over its item's valid keys."""
    w = valid_keys[:, None, None, :].double().expand(-1, heads, n_queries, -1)
    return w / w.sum(-1, keepdim=True)


def test_named_entropy_takes_queries_and_keys_from_the_right_side():
    # source lengths 5 and 3 (padded to 5), target lengths 2 and 4 (padded to 4)
    src_pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    tgt_pad = torch.tensor([[False] * 2 + [True] * 2, [False] * 4])
    attention = {"enc_self.0": uniform_over(~src_pad, 5), "dec_self.0": uniform_over(~tgt_pad, 4),
                 "cross.0": uniform_over(~src_pad, 4)}
    entropy = entropy_by_name(attention, src_pad, tgt_pad)
    log = math.log
    expected = {"enc_self.0": (5 * log(5) + 3 * log(3)) / 8,      # 8 source queries
                "dec_self.0": (2 * log(2) + 4 * log(4)) / 6,      # 6 target queries
                "cross.0": (2 * log(5) + 4 * log(3)) / 6}         # target queries, source keys
    for name, value in expected.items():
        assert entropy[name] == pytest.approx([value, value]), name


def test_named_entropy_of_a_transformer_whose_source_and_target_lengths_differ():
    torch.manual_seed(0)
    model = build_seq2seq("transformer", 20, 20, d_model=16, heads=2, enc_layers=2, dec_layers=2, ffn=32).eval()
    src = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, PAD, PAD, PAD, PAD]])
    tgt = torch.tensor([[1, 12, 13], [1, 14, PAD]])
    with torch.no_grad():
        out = model(src, tgt, need_weights=True)
    entropy = entropy_by_name(out.attention, src == PAD, tgt == PAD)
    assert set(entropy) == {"enc_self.0", "enc_self.1", "dec_self.0", "dec_self.1",
                            "cross.0", "cross.1"}
    # no head can be more spread than uniform over the longest row of keys it may see
    bound = {"enc_self": math.log(7), "dec_self": math.log(3), "cross": math.log(7)}
    for name, heads in entropy.items():
        assert len(heads) == 2 and all(0 < h <= bound[name.split(".")[0]] + 1e-9 for h in heads)
    assert last_layer(out.attention, "cross") == "cross.1"


def test_last_layer_orders_by_layer_number():
    assert last_layer([f"cross.{i}" for i in range(12)] + ["enc_self.11"], "cross") == "cross.11"
    assert last_layer(["cross"], "cross") == "cross"
    assert last_layer(["enc_self.0"], "cross") is None


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


@pytest.mark.parametrize("n_src,n_tgt", [(3, 5), (12, 7)])
def test_heatmap_is_a_png_of_the_documented_size(tmp_path, n_src, n_tgt):
    weights = torch.rand(n_tgt, n_src).softmax(-1)
    src = [f"▁s{i}" for i in range(n_src)]
    tgt = [f"t{i}" for i in range(n_tgt)]
    path = save_heatmap(weights, src, tgt, tmp_path / "maps" / "a.png", title="cross.0 head 1")
    assert path.exists()
    assert png_size(path) == heatmap_size(n_src, n_tgt) == (200 + 40 * n_src, 200 + 40 * n_tgt)


def test_heatmap_data_is_saved_beside_the_picture_for_the_report(tmp_path):
    weights = torch.rand(3, 2).softmax(-1)
    path = save_heatmap(weights, ["▁das", "</s>"], ["the", "house", "</s>"], tmp_path / "val-0.png",
                        title="cross (mean over heads)")
    data = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    assert data["source"] == ["▁das", "</s>"] and data["target"] == ["the", "house", "</s>"]
    assert torch.tensor(data["weights"]) == pytest.approx(weights, abs=5e-5)
    assert data["title"] == "cross (mean over heads)"


def test_heatmap_rejects_mismatched_tokens(tmp_path):
    with pytest.raises(ValueError):
        save_heatmap(torch.rand(2, 3), ["a", "b"], ["x", "y"], tmp_path / "b.png")
