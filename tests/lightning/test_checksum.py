"""lightning/checksum.py: checkpoints written with their content checksum, from one CPU snapshot."""

from __future__ import annotations

import io
import os
import threading
import time

import pytest
import torch

from lit_attention.lightning.checksum import (CHECKSUM_KEY, ChecksummedCheckpointIO, content_checksum,
                                              snapshot_on_cpu, verify)


def checkpoint_of_a_trained_model() -> dict:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(11, 6), torch.nn.Linear(6, 11))
    net[1].weight = net[0].weight                       # tied: one parameter under two names
    opt = torch.optim.Adam(net.parameters())
    net(torch.tensor([[1, 2, 3]])).sum().backward()
    opt.step()
    return {"state_dict": net.state_dict(), "optimizer_states": [opt.state_dict()], "epoch": 3,
            "loops": {"mask": torch.tensor([True, False])}}


def test_the_snapshot_is_one_copy_of_each_tensor_with_the_same_contents():
    """Tensors off the CPU (here every tensor is told to be: the grouped copy runs on a CPU as on a
    GPU): equal values, shapes, state-dict metadata and checksum, each in a storage of its own (as
    torch.save writes them), a copy of that moment. Tensors on the CPU are left as they are."""
    checkpoint = checkpoint_of_a_trained_model()
    assert snapshot_on_cpu(checkpoint) is checkpoint
    snap = snapshot_on_cpu(checkpoint, moved=lambda t: True)
    assert content_checksum(snap) == content_checksum(checkpoint)
    tensors = [*snap["state_dict"].values(), snap["loops"]["mask"],
               *(v for state in snap["optimizer_states"][0]["state"].values() for v in state.values())]
    assert len({t.untyped_storage().data_ptr() for t in tensors}) == len(tensors)
    assert snap["loops"]["mask"].tolist() == [True, False] and snap["epoch"] == 3
    assert snap["state_dict"]._metadata == checkpoint["state_dict"]._metadata   # module versions
    viewed = snapshot_on_cpu(checkpoint, moved=lambda t: True, split=False)   # the writer thread's: views
    assert content_checksum(viewed) == content_checksum(checkpoint)
    floats = [*viewed["state_dict"].values(), *viewed["optimizer_states"][0]["state"][0].values()]
    assert len({t.untyped_storage().data_ptr() for t in floats}) == 1   # one storage per dtype
    before = snap["state_dict"]["1.bias"].clone()
    with torch.no_grad():
        checkpoint["state_dict"]["1.bias"].add_(1.0)
    assert torch.equal(snap["state_dict"]["1.bias"], before)


def test_a_saved_checkpoint_loads_verified_and_equal(tmp_path):
    checkpoint = checkpoint_of_a_trained_model()
    io = ChecksummedCheckpointIO()
    io.save_checkpoint(checkpoint, tmp_path / "last.ckpt")
    loaded = io.load_checkpoint(tmp_path / "last.ckpt")
    assert loaded[CHECKSUM_KEY] == content_checksum(checkpoint)
    for name, value in checkpoint["state_dict"].items():
        assert torch.equal(loaded["state_dict"][name], value)
    net = torch.nn.Sequential(torch.nn.Embedding(11, 6), torch.nn.Linear(6, 11))
    net[1].weight = net[0].weight
    net.load_state_dict(loaded["state_dict"])
    torch.optim.Adam(net.parameters()).load_state_dict(loaded["optimizer_states"][0])


def test_a_save_that_fails_leaves_the_old_checkpoint_and_no_part_of_the_new(tmp_path):
    """The file is written beside its place and renamed over it: a save that breaks off (here an
    object torch.save cannot pickle, after the tensors) leaves the previous checkpoint whole."""
    io = ChecksummedCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint(checkpoint_of_a_trained_model(), path)
    before = path.read_bytes()
    broken = {**checkpoint_of_a_trained_model(), "zz": lambda: None}
    with pytest.raises(Exception):
        io.save_checkpoint(broken, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt"]
    assert io.load_checkpoint(path)["epoch"] == 3


def test_a_background_save_returns_at_once_and_writes_the_checkpoint_of_that_moment(tmp_path):
    """A FIFO in the place of the file being written holds the writer until this test reads it:
    save_checkpoint has returned by then (training goes on, here changing the weights in place), and
    the bytes written are the checkpoint as it was when saved."""
    checkpoint = checkpoint_of_a_trained_model()
    path = tmp_path / "last.ckpt"
    os.mkfifo(tmp_path / ".last.ckpt.partial")
    writes = ChecksummedCheckpointIO(background=True)
    saver = threading.Thread(target=writes.save_checkpoint, args=(checkpoint, path), daemon=True)
    saver.start()
    saver.join(timeout=60)
    assert not saver.is_alive(), "save_checkpoint waited for its file to be written"
    saved = {name: t.clone() for name, t in checkpoint["state_dict"].items()}
    with torch.no_grad():
        for t in checkpoint["state_dict"].values():
            t.add_(1.0)
    with open(tmp_path / ".last.ckpt.partial", "rb") as fifo:
        written = fifo.read()
    writes.teardown()
    written = io.BytesIO(written)
    loaded = torch.load(written, weights_only=True)
    verify(loaded, path)
    for name, value in saved.items():
        assert torch.equal(loaded["state_dict"][name], value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (a transfer that does not wait for it)")
def test_a_background_save_on_a_gpu_does_not_wait_for_the_device_and_writes_that_moment(tmp_path):
    """Any wait for the device (a pageable copy, a synchronization) is an error while the save runs
    (torch.cuda.set_sync_debug_mode): the device is kept busy, the weights change in place right
    after the save returns, and the file holds them as they were at the save."""
    torch.manual_seed(0)
    state = {"w": torch.randn(1024, 1024, device="cuda"), "h": torch.randn(7, device="cuda").half()}
    expected = {name: t.cpu() for name, t in state.items()}
    busy = torch.randn(4096, 4096, device="cuda")
    for _ in range(30):   # ~tens of ms of queued work
        busy = torch.tanh(busy @ busy)
    writes = ChecksummedCheckpointIO()
    torch.cuda.set_sync_debug_mode("error")
    try:
        writes.save_checkpoint({"state_dict": state, "epoch": 1}, tmp_path / "last.ckpt")
    finally:
        torch.cuda.set_sync_debug_mode(0)
    state["w"].add_(1.0)
    loaded = writes.load_checkpoint(tmp_path / "last.ckpt")   # waits for the write
    writes.teardown()
    for name, value in expected.items():
        assert torch.equal(loaded["state_dict"][name], value)


def test_a_background_write_that_failed_is_raised_and_leaves_the_old_checkpoint(tmp_path):
    writes = ChecksummedCheckpointIO(background=True)
    path = tmp_path / "last.ckpt"
    writes.save_checkpoint(checkpoint_of_a_trained_model(), path)
    writes.flush()
    before = path.read_bytes()
    writes.save_checkpoint({**checkpoint_of_a_trained_model(), "zz": lambda: None}, path)   # fails in the writer
    with pytest.raises(Exception, match="lambda|pickle"):
        writes.teardown()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    writes.save_checkpoint(checkpoint_of_a_trained_model(), path)   # the error was raised once
    assert writes.load_checkpoint(path)["epoch"] == 3   # loading waits for the write


def test_a_fork_waits_for_the_writes_in_progress(tmp_path):
    """A child forked while the writer thread holds a lock could wait on it forever (a DataLoader
    worker is forked): a fork waits for pending writes. The writer is held by a FIFO that a reader
    thread drains after a pause; when fork returns in the parent, the file is in its place."""
    path = tmp_path / "last.ckpt"
    os.mkfifo(tmp_path / ".last.ckpt.partial")
    writes = ChecksummedCheckpointIO(background=True)
    writes.save_checkpoint(checkpoint_of_a_trained_model(), path)

    def drain():
        time.sleep(0.5)   # the parent forks meanwhile
        with open(tmp_path / ".last.ckpt.partial", "rb") as fifo:
            fifo.read()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert path.exists(), "fork returned before the checkpoint being written was in its place"
    writes.teardown()
    reader.join(timeout=60)
