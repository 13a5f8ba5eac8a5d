"""The n-gram language model: hand-computed perplexities, normalisation, batching, checkpoints."""

import math

import pytest
import torch

from lit_attention.data.vocab import BOS, UNK
from lit_attention.models.lm import build_lm
from lit_attention.registry import NGRAM_SMOOTHING


def ngram(vocab_size: int, **options):
    """An n-gram LM, the options left out at the registry's defaults."""
    return build_lm("ngram", vocab_size, **options)

A, B_ = 4, 5                       # two word ids after the four specials; vocabulary size 6
TRAIN = [A, B_, A, B_, A, A]       # "a b a b a a"
TEST = [B_, A, A, B_, UNK, A]      # "b a a b <unk> a": an unseen token and an unseen context


def log_prob(lm, stream) -> torch.Tensor:
    """Log-probability of every token of a 1-D stream, its first token after BOS context, from the
    model's distributions (independently of its forward)."""
    tokens = torch.as_tensor(list(map(int, stream)), dtype=torch.long)
    padded = [BOS] * (lm.order - 1) + tokens.tolist()
    contexts = [tuple(padded[i:i + lm.order - 1]) for i in range(len(tokens))]
    return lm.distributions(contexts).gather(1, tokens[:, None]).squeeze(1).log()


def perplexity(lm, stream):
    return math.exp(-log_prob(lm, stream).mean().item())


def test_interpolated_absolute_discount_perplexity_by_hand():
    lm = ngram(vocab_size=6, order=2, delta=1.0, discount=0.5, smoothing="interp").fit(TRAIN)
    # Unigram, add-one over 6 tokens from counts a:4 b:2 (N=6): P1(a)=5/12, P1(b)=3/12, P1(unk)=1/12.
    # Bigram contexts (the first token follows BOS): BOS->a; a->b,b,a (c=3, 2 types); b->a,a (c=2, 1 type).
    # P(w|h) = max(c(h,w) - 0.5, 0)/c(h) + 0.5 * types(h)/c(h) * P1(w); unseen context -> P1(w).
    p_b_bos = 0 + 0.5 * 1 / 1 * 3 / 12            # 1/8
    p_a_b = 1.5 / 2 + 0.5 * 1 / 2 * 5 / 12        # 41/48
    p_a_a = 0.5 / 3 + 0.5 * 2 / 3 * 5 / 12        # 11/36
    p_b_a = 1.5 / 3 + 0.5 * 2 / 3 * 3 / 12        # 7/12
    p_unk_b = 0 + 0.5 * 1 / 2 * 1 / 12            # 1/48
    p_a_unk = 5 / 12                              # context <unk> never seen: unigram
    probs = [p_b_bos, p_a_b, p_a_a, p_b_a, p_unk_b, p_a_unk]
    assert probs[:4] == pytest.approx([1 / 8, 41 / 48, 11 / 36, 7 / 12])
    expected = math.exp(-sum(math.log(p) for p in probs) / len(probs))
    assert perplexity(lm, TEST) == pytest.approx(expected, rel=1e-6)
    assert expected == pytest.approx(4.2691, abs=1e-4)


def test_add_delta_bigram_perplexity_by_hand():
    lm = ngram(vocab_size=6, order=2, delta=1.0, smoothing="add").fit(TRAIN)
    # P(w|h) = (c(h,w) + 1) / (c(h) + 6)
    probs = [(0 + 1) / (1 + 6), (2 + 1) / (2 + 6), (1 + 1) / (3 + 6), (2 + 1) / (3 + 6),
             (0 + 1) / (2 + 6), (0 + 1) / (0 + 6)]
    expected = math.exp(-sum(math.log(p) for p in probs) / len(probs))
    assert perplexity(lm, TEST) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("smoothing", NGRAM_SMOOTHING)
def test_unigram_add_delta_by_hand(smoothing):
    """Order 1: both smoothings are the add-delta unigram."""
    lm = ngram(vocab_size=6, order=1, delta=0.5, smoothing=smoothing).fit(TRAIN)
    # (c(w) + 0.5) / (6 + 3): a 4.5/9, b 2.5/9
    assert log_prob(lm, [A, B_]).exp().tolist() == pytest.approx([4.5 / 9, 2.5 / 9])


@pytest.mark.parametrize("smoothing", ["add", "interp"])
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_context_gets_a_proper_distribution(order, smoothing):
    torch.manual_seed(0)
    lm = ngram(vocab_size=12, order=order, delta=0.1, smoothing=smoothing)
    lm.fit(torch.randint(4, 10, (300,)))
    contexts = [tuple(torch.randint(0, 12, (order - 1,)).tolist()) for _ in range(50)]
    probs = lm.distributions(contexts)
    assert (probs > 0).all()
    assert torch.allclose(probs.sum(1), torch.ones(50, dtype=probs.dtype), atol=1e-6)


def test_forward_over_consecutive_batches_scores_the_whole_stream():
    torch.manual_seed(0)
    stream = torch.randint(4, 12, (3, 40))
    lm = ngram(vocab_size=12, order=3, delta=0.1).fit(stream[0])
    whole, _ = lm(stream)
    first, state = lm(stream[:, :17])
    second, _ = lm(stream[:, 17:], state)
    assert torch.allclose(torch.cat([first, second], 1), whole)
    # forward predicts the token after each input; log_prob scores each token after BOS context
    row = stream[1]
    after_first = whole[1, :-1].gather(1, row[1:, None]).squeeze(1)
    assert torch.allclose(after_first, log_prob(lm, row)[1:])


def test_counts_survive_the_state_dict():
    torch.manual_seed(0)
    stream = torch.randint(4, 12, (200,))
    lm = ngram(vocab_size=12, order=3).fit(stream)
    fresh = ngram(vocab_size=12, order=3)
    fresh.load_state_dict(lm.state_dict())
    assert torch.equal(log_prob(fresh, stream), log_prob(lm, stream))


def test_scoring_under_inference_mode_on_two_threads():
    """As `lit-attention test` scores a checkpoint (Lightning evaluates under inference mode):
    torch's sparse index_select failed there on more than one thread, from ~10k contexts."""
    torch.manual_seed(0)
    stream = torch.randint(4, 68, (60_000,))
    lm = ngram(vocab_size=68, order=4).fit(stream)
    assert len(lm.tables[3]) > 10_000
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.inference_mode():
            logp, _ = lm(stream[:2048].reshape(8, 256))
    finally:
        torch.set_num_threads(threads)
    assert torch.allclose(logp.exp().sum(-1), torch.ones(8, 256))


def test_unfitted_model_and_bad_options_fail_clearly():
    with pytest.raises(RuntimeError, match="fit"):
        log_prob(ngram(vocab_size=6), [A])
    with pytest.raises(ValueError, match="valid choices: add, interp"):
        ngram(vocab_size=6, smoothing="stupid")
    with pytest.raises(ValueError, match="delta"):
        ngram(vocab_size=6, delta=0.0)

