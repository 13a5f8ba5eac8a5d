"""For tests of what DDP ranks reduce: run a function on two local gloo ranks (real
torch.distributed on CPU, spawned processes), and what the ranks of those tests do.

A spawned rank imports the function by name, so it lives here (tests/ is on sys.path), not in a
test file. Spawning costs seconds (each rank imports torch): a test runs all its cases in one.
"""

import pickle
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from lit_attention.lightning.totals import Hypotheses, TokenLosses, TokenNLL


def run(fn, world_size: int = 2) -> list:
    """``[fn(0), fn(1), ...]``, each computed on its own rank of one gloo process group."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        torch.multiprocessing.spawn(_rank, args=(world_size, port, fn, out), nprocs=world_size)
        return [pickle.loads((Path(out) / f"{rank}.pkl").read_bytes()) for rank in range(world_size)]


def _rank(rank: int, world_size: int, port: int, fn, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        result = fn(rank)
    finally:
        dist.destroy_process_group()
    (Path(out) / f"{rank}.pkl").write_bytes(pickle.dumps(result))


# -- the ranks of tests/lightning/test_totals.py ------------------------------------------------

# (summed NLL, tokens) per batch on each rank: 2**24 + 9 tokens in all, which float32 cannot hold
NLL_BATCHES = {0: [(1.25, 3), (2.5, 4)], 1: [(0.125, 2**24), (1e-9, 2)]}
# (example index, decoded ids [B, L], seconds) per batch on each rank, rows of different widths
HYP_BATCHES = {
    "uneven": {0: [([4, 1], [[5, 6, 3], [7, 3, 0]], 1.0), ([0, 2, 3], [[8, 3], [9, 9], [3, 0]], 1.0)],
               1: [([6, 5], [[4, 4, 4, 3], [3, 0, 0, 0]], 3.0)]},
    "one rank empty": {0: [([1, 0], [[5, 3], [6, 3]], 0.5)], 1: []},
}

# (window indices, NLL [B, W], scored [B, W]) per batch on each rank: windows of width 3, the
# first scoring all its targets, later ones their last 2 (stride 2), the last window all-PAD
LOSS_BATCHES = {0: [([0, 1], [[1., 2., 3.], [9., 4., 5.]], [[1, 1, 1], [0, 1, 1]])],
                1: [([2], [[9., 6., 7.]], [[0, 1, 1]]), ([3], [[0., 0., 0.]], [[0, 0, 0]])]}


def totals_on_rank(rank: int) -> dict:
    """What TokenNLL and Hypotheses (every scenario) compute on this rank."""
    totals = TokenNLL()
    for nll, tokens in NLL_BATCHES[rank]:
        totals.update(torch.tensor(nll), torch.tensor(tokens))
    out = {"nll": totals.compute()}
    for scenario, batches in HYP_BATCHES.items():
        hyps = Hypotheses()
        for index, ids, seconds in batches[rank]:
            hyps.update(torch.tensor(index), torch.tensor(ids), seconds)
        out[scenario] = hyps.compute()
    losses = TokenLosses()
    for window, nll, scored in LOSS_BATCHES[rank]:
        losses.update(torch.tensor(window), torch.tensor(nll), torch.tensor(scored, dtype=torch.bool))
    out["losses"] = losses.compute().tolist()
    return out
