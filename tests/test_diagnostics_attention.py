import math
import struct

import pytest
import torch

from lit_attention.diagnostics import attention_entropy, heatmap_size, save_heatmap


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


def test_heatmap_rejects_mismatched_tokens(tmp_path):
    with pytest.raises(ValueError):
        save_heatmap(torch.rand(2, 3), ["a", "b"], ["x", "y"], tmp_path / "b.png")
