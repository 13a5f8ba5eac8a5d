"""Token-count batching: max_tokens, bucketing, rank shards, resumable loaders, collate, and
padding training batches to listed lengths (one length per batch)."""

import pickle

import pytest
import torch

from lit_attention.data.batching import (Batch, ResumableDataLoader, TokenBatchSampler, collate, fit_length,
                                         padded_length)
from lit_attention.data.vocab import BOS, EOS, PAD


def lengths_for(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, 40, (n,), generator=g).tolist()


def test_batches_respect_max_tokens_and_cover_each_example_once():
    lengths = lengths_for(1000)
    sampler = TokenBatchSampler(lengths, max_tokens=200, seed=1, bucket_size_multiplier=5)
    orders = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert len(batches) == len(sampler)
        for batch in batches:
            assert max(lengths[i] for i in batch) * len(batch) <= 200
        flat = [i for batch in batches for i in batch]
        assert sorted(flat) == list(range(1000))
        orders.append(flat)
    assert orders[0] != orders[1]
    sampler.set_epoch(0)
    assert [i for b in sampler for i in b] == orders[0]       # same (seed, epoch), same order


def test_bucketing_reduces_padding():
    lengths = lengths_for(2000)
    def padding(multiplier):
        batches = list(TokenBatchSampler(lengths, 400, bucket_size_multiplier=multiplier))
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b)
                   for b in batches)
    assert padding(100) < 0.5 * padding(1)


def test_oversized_example_gets_its_own_batch():
    batches = list(TokenBatchSampler([5, 50, 5], max_tokens=20, shuffle=False))
    assert [1] in batches and sorted(i for b in batches for i in b) == [0, 1, 2]


def test_validation_order_is_fixed_and_unpadded():
    lengths = lengths_for(101)
    a = TokenBatchSampler(lengths, 100, shuffle=False, pad_to_equal=False)
    b = TokenBatchSampler(lengths, 100, shuffle=False, pad_to_equal=False)
    b.set_epoch(3)
    assert list(a) == list(b)
    assert sorted(i for batch in a for i in batch) == list(range(101))


@pytest.mark.parametrize("replicas", [2, 3])
def test_rank_shards(replicas):
    lengths = lengths_for(500)
    n_global = len(TokenBatchSampler(lengths, 150, seed=4))
    assert n_global % replicas                             # padding is really exercised
    # unpadded: disjoint shards covering every example
    shards = [list(TokenBatchSampler(lengths, 150, seed=4, num_replicas=replicas, rank=r,
                                     pad_to_equal=False)) for r in range(replicas)]
    flat = [i for shard in shards for b in shard for i in b]
    assert sorted(flat) == list(range(500))
    # padded: equal counts; the only repeats are the padding batches
    shards = [list(TokenBatchSampler(lengths, 150, seed=4, num_replicas=replicas, rank=r))
              for r in range(replicas)]
    assert len({len(s) for s in shards}) == 1
    batches = [tuple(b) for shard in shards for b in shard]
    assert len(batches) - len(set(batches)) == replicas - n_global % replicas
    assert sorted({i for b in batches for i in b}) == list(range(500))


def test_sampler_resumes_mid_epoch():
    lengths = lengths_for(300)
    sampler = TokenBatchSampler(lengths, 120, seed=9)
    sampler.set_epoch(2)
    full = list(sampler)
    it = iter(sampler)
    consumed = [next(it) for _ in range(4)]
    state = sampler.state_dict()
    assert state == {"epoch": 2, "batches_done": 4}
    resumed = TokenBatchSampler(lengths, 120, seed=9)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)                    # Lightning calls this again at the resumed epoch
    assert consumed + list(resumed) == full
    assert len(list(resumed)) == len(full)  # the skip applies once
    resumed.set_epoch(3)
    assert len(list(resumed)) == len(resumed)


@pytest.mark.parametrize("workers", [0, 2])
def test_loader_state_counts_returned_batches(workers):
    lengths = lengths_for(300)
    examples = [{"idx": i, "src": [5] * (n - 1), "tgt": [6]} for i, n in enumerate(lengths)]

    def loader():
        sampler = TokenBatchSampler(lengths, 120, seed=9)
        sampler.set_epoch(1)
        return ResumableDataLoader(examples, batch_sampler=sampler, collate_fn=collate,
                                   num_workers=workers)

    full = [b["idx"].tolist() for b in loader()]
    first = loader()
    it = iter(first)
    consumed = [next(it)["idx"].tolist() for _ in range(3)]
    assert first.state_dict() == {"epoch": 1, "batches_done": 3}   # workers ran further ahead
    del it
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    assert consumed + [b["idx"].tolist() for b in resumed] == full
    assert resumed.state_dict() == {"epoch": 1, "batches_done": len(full)}


def test_lightning_sets_the_epoch_through_the_batch_sampler():
    from lightning.fabric.utilities.data import _set_sampler_epoch
    sampler = TokenBatchSampler(lengths_for(50), 100)
    loader = torch.utils.data.DataLoader(list(range(50)), batch_sampler=sampler)
    _set_sampler_epoch(loader, 5)
    assert sampler.epoch == 5


def test_collate_shapes_and_specials():
    batch = collate([{"idx": 7, "src": [10, 11, 12], "tgt": [20]},
                     {"idx": 3, "src": [13], "tgt": [21, 22, 23, 24]}])
    assert batch["src"].tolist() == [[10, 11, 12, EOS], [13, EOS, PAD, PAD]]
    assert batch["tgt_in"].tolist() == [[BOS, 20, PAD, PAD, PAD], [BOS, 21, 22, 23, 24]]
    assert batch["tgt_out"].tolist() == [[20, EOS, PAD, PAD, PAD], [21, 22, 23, 24, EOS]]
    assert batch["idx"].tolist() == [7, 3]
    assert all(batch[k].dtype == torch.long for k in ("src", "tgt_in", "tgt_out", "idx"))
    assert batch["keep"].tolist() == [True, True]
    assert padded_length([1, 2, 3], [1]) == 4


def test_a_batch_from_a_loader_worker_arrives_as_one_buffer_equal_to_the_collated_one():
    """torch.multiprocessing sends a file descriptor per tensor storage, each with a socket
    handshake in the receiving thread: a worker's batch arrives as views of one storage, with the
    values, dtypes and shapes of the batch collated here."""
    examples = [{"src": [4, 5, 6, 7][: 1 + i % 4], "tgt": [8, 9][: 1 + i % 2], "idx": i, **({"dup": True} if i == 5 else {})}
                for i in range(12)]
    groups = [examples[i:i + 4] for i in range(0, 12, 4)]
    loader = torch.utils.data.DataLoader(groups, batch_size=None, collate_fn=collate, num_workers=2)
    received = list(loader)
    assert len(received) == 3
    for group, batch in zip(groups, received):
        assert type(batch) is Batch
        assert len({t.untyped_storage().data_ptr() for t in batch.values()}) == 1
        here = collate(group)
        assert list(batch) == list(here)
        for key, value in here.items():
            assert batch[key].dtype == value.dtype and torch.equal(batch[key], value)
    assert received[1]["keep"].tolist() == [True, False, True, True]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (pinned memory)")
def test_a_pinned_batch_from_a_worker_stays_a_batch_on_its_way_to_the_gpu():
    """As a loader for a CUDA device runs: workers, then the pin-memory thread, then Lightning's
    move to the device; every tensor pinned, then on the GPU, with the values collated here."""
    from lightning.fabric.utilities.apply_func import move_data_to_device
    examples = [{"src": [4, 5, 6][: 1 + i % 3], "tgt": [8, 9][: 1 + i % 2], "idx": i} for i in range(8)]
    groups = [examples[:4], examples[4:]]
    loader = torch.utils.data.DataLoader(groups, batch_size=None, collate_fn=collate, num_workers=2, pin_memory=True)
    for group, batch in zip(groups, loader):
        assert type(batch) is Batch and all(t.is_pinned() for t in batch.values())
        moved = move_data_to_device(batch, torch.device("cuda"))
        assert type(moved) is Batch and all(t.is_cuda for t in moved.values())
        for key, value in collate(group).items():
            assert torch.equal(moved[key].cpu(), value)


def test_a_batch_with_a_value_that_is_not_a_plain_cpu_tensor_pickles_as_a_dict():
    for odd in ("x", torch.ones(2, requires_grad=True), torch.eye(2).to_sparse()):
        batch = Batch(src=torch.tensor([[1, 2]]), odd=odd)
        again = pickle.loads(pickle.dumps(batch))
        assert type(again) is Batch and torch.equal(again["src"], batch["src"])
        if isinstance(odd, str):
            assert again["odd"] == odd
        else:
            assert torch.equal(again["odd"].to_dense(), odd.to_dense()) and again["odd"].requires_grad == odd.requires_grad


def test_evaluation_padding_for_ranks_is_marked_and_never_counted():
    from lit_attention.data.batching import MarkedExamples, TokenBatchSampler, collate
    examples = [{"src": [10], "tgt": [20], "idx": i} for i in range(3)]
    seen = []
    for rank in (0, 1):
        sampler = TokenBatchSampler([3, 3, 3], max_tokens=100, shuffle=False, num_replicas=2,
                                    rank=rank, mark_padding=True)
        batches = [collate([MarkedExamples(examples)[i] for i in b]) for b in sampler]
        assert len(batches) == 1, "every rank gets a batch, even with one batch in all"
        seen += [i for b in batches for i, k in zip(b["idx"].tolist(), b["keep"].tolist()) if k]
    assert sorted(seen) == [0, 1, 2]


def test_loaders_pin_their_batches_only_for_a_cuda_device():
    from types import SimpleNamespace

    import torch

    from lit_attention.data.batching import pin_memory
    on = lambda device: SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))  # noqa: E731
    assert pin_memory(on("cuda:0")) and not pin_memory(on("cpu")) and not pin_memory(None)


def test_loader_workers_are_as_asked_else_none_on_a_cpu_and_some_for_a_cuda_device(monkeypatch):
    from types import SimpleNamespace

    from lit_attention.data.batching import CUDA_WORKERS, loader_workers
    on = lambda device: SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))  # noqa: E731
    assert loader_workers(3, on("cpu")) == 3 and loader_workers(0, on("cuda:0")) == 0
    assert loader_workers(None, on("cpu")) == 0 and loader_workers(None, None) == 0
    monkeypatch.setenv("OMP_NUM_THREADS", "16")
    assert loader_workers(None, on("cuda:0")) == CUDA_WORKERS
    monkeypatch.setenv("OMP_NUM_THREADS", "2")       # a packed sweep trial's share of the cores
    assert loader_workers(None, on("cuda:0")) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")       # nothing beyond the main process
    assert loader_workers(None, on("cuda:0")) == 0


# ---- padding to listed lengths --------------------------------------------------------------

LISTED = (8, 16, 24, 32, 48)


def test_fit_length_is_the_smallest_listed_length_that_holds_it():
    assert [fit_length(n, LISTED) for n in (1, 8, 9, 16, 17, 47, 48)] == [8, 8, 16, 16, 24, 48, 48]
    with pytest.raises(ValueError, match="no listed length holds 49 positions"):
        fit_length(49, LISTED)


def test_one_length_per_batch_gives_every_epoch_the_same_few_batch_shapes():
    lengths = [fit_length(n, LISTED) for n in lengths_for(3000)]
    free = TokenBatchSampler(lengths, 400, seed=2)
    assert any(len({lengths[i] for i in b}) > 1 for b in free)      # without it batches mix lengths
    sampler = TokenBatchSampler(lengths, 400, seed=2, one_length=True)
    epochs = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert sorted(i for b in batches for i in b) == list(range(3000))
        sizes = {}
        for b in batches:
            (length,) = {lengths[i] for i in b}
            assert length * len(b) <= 400
            sizes.setdefault(length, []).append(len(b))
        for length, seen in sizes.items():   # full batches, as many as max_tokens allows, but one
            assert sum(size < 400 // length for size in seen) <= 1
        epochs.append((batches, {(length, size) for length, seen in sizes.items() for size in seen}))
    assert {frozenset(b) for b in epochs[0][0]} != {frozenset(b) for b in epochs[1][0]}   # other batches,
    assert epochs[0][1] == epochs[1][1] == epochs[2][1]                                 # same shapes
    assert len(epochs[0][1]) <= 2 * len(LISTED)


def test_one_length_sampler_resumes_mid_epoch_and_shards_by_rank():
    lengths = [fit_length(n, LISTED) for n in lengths_for(600)]
    make = lambda **kw: TokenBatchSampler(lengths, 200, seed=3, one_length=True, **kw)  # noqa: E731
    sampler = make()
    sampler.set_epoch(1)
    full = list(sampler)
    it = iter(sampler)
    consumed = [next(it) for _ in range(5)]
    resumed = make()
    resumed.load_state_dict(sampler.state_dict())
    resumed.set_epoch(1)
    assert consumed + list(resumed) == full
    shards = [list(make(num_replicas=2, rank=r, pad_to_equal=False)) for r in (0, 1)]
    assert sorted(i for shard in shards for b in shard for i in b) == list(range(600))
    assert shards[0] == list(make())[0::2]


def test_collate_pads_both_sides_to_the_smallest_listed_length_that_holds_the_batch():
    examples = [{"idx": 7, "src": [10, 11, 12], "tgt": [20]}, {"idx": 3, "src": [13], "tgt": [21, 22, 23, 24]}]
    plain, padded = collate(examples), collate(examples, pad_to=(4, 8, 16))
    for key in ("src", "tgt_in", "tgt_out"):
        assert padded[key].shape == (2, 8)        # the longest side takes 5 positions: 8
        width = plain[key].size(1)
        assert torch.equal(padded[key][:, :width], plain[key]) and (padded[key][:, width:] == PAD).all()
    assert torch.equal(padded["idx"], plain["idx"]) and torch.equal(padded["keep"], plain["keep"])
    assert collate(examples, pad_to=(5,))["src"].shape == (2, 5)
    with pytest.raises(ValueError, match="no listed length holds 5"):
        collate(examples, pad_to=(4,))
