"""Loader batches: the main process's CPU time to receive a batch from DataLoader workers.

torch.multiprocessing sends each CPU tensor's storage from a worker as a file descriptor, with a
socket handshake each, run in Python by the receiving thread (on a GPU, the loader's pin-memory
thread, which shares the interpreter with the launch-bound training thread). The training loader's
batches (Multi30k 4,096-token batches, or toy-mt with --quick or without ../shared/data) come from
2 persistent workers, collated as ``data.batching.Batch`` (one buffer a batch) and as a plain dict
of its five tensors (the way before issue 38's change), in alternating rounds; printed: the main
thread's CPU time per batch (time.thread_time; here no pin-memory thread, so the main thread
receives) and the wall time per batch. No goal: the ratio says what the one buffer saves.

    .venv/bin/python bench/loader_batches.py [--quick] [--batches 300] [--rounds 3]
"""

from __future__ import annotations

import statistics
import time

from torch.utils.data import DataLoader

import benchlib as B

_collate = None   # the training loader's collate function (set before the workers fork)


def as_dict(examples):
    return dict(_collate(examples))


def as_batch(examples):
    return _collate(examples)


def per_batch(loader: DataLoader, n: int) -> tuple[float, float]:
    """(main-thread CPU seconds, wall seconds) per batch over ``n`` batches, after a first one."""
    batches = iter(loader)
    next(batches)
    time.sleep(0.5)   # the workers fill their queue
    cpu, wall, count = time.thread_time(), time.perf_counter(), 0
    while count < n:
        try:
            next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        count += 1
    return (time.thread_time() - cpu) / n, (time.perf_counter() - wall) / n


def main() -> None:
    global _collate
    p = B.parser(__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    B.setup(args)
    n, rounds = (40, 2) if args.quick else (args.batches, args.rounds)
    dm, desc = B.translation_data(args.quick)
    train = dm.train_dataloader()
    _collate = train.collate_fn
    print(f"{B.machine()}; {desc}; 2 workers, {n} batches a round, {rounds} rounds", flush=True)
    loaders = {name: DataLoader(train.dataset, batch_sampler=train.batch_sampler, collate_fn=fn, num_workers=2,
                                persistent_workers=True, prefetch_factor=4)
               for name, fn in (("dict of tensors", as_dict), ("Batch (one buffer)", as_batch))}
    measured = {name: [] for name in loaders}
    for _ in range(rounds):
        for name, loader in loaders.items():
            measured[name].append(per_batch(loader, n))
    rows, cpu = [], {}
    for name, values in measured.items():
        cpu[name] = statistics.median(v[0] for v in values)
        rows.append([name, f"{1000 * cpu[name]:.3f}", f"{1000 * statistics.median(v[1] for v in values):.3f}"])
    B.table(["batches as", "main-thread CPU ms/batch (median of rounds)", "wall ms/batch"], rows)
    plain, packed = cpu["dict of tensors"], cpu["Batch (one buffer)"]
    B.summary(f"loader_batches: main-thread CPU per batch from 2 workers: dict {1000 * plain:.3f} ms, "
              f"Batch {1000 * packed:.3f} ms = {plain / packed:.2f}x less")


if __name__ == "__main__":
    main()
