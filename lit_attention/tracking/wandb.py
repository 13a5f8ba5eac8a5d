"""Weights & Biases: online when a key and the network are there, offline otherwise, never a hang."""

from __future__ import annotations

import netrc
import os
import socket
from pathlib import Path


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _reachable(host: str = "api.wandb.ai", port: int = 443, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wandb_mode() -> str:
    """The mode to run in: an explicit WANDB_MODE wins, else online only with a key and a route."""
    mode = os.environ.get("WANDB_MODE")
    if mode in ("online", "offline", "disabled"):
        return mode
    return "online" if _has_api_key() and _reachable() else "offline"


def make_wandb_logger(run_dir: Path, project: str, group: str, name: str, job_type: str,
                      tags: list[str], run_id: str):
    from lightning.pytorch.loggers import WandbLogger

    offline = wandb_mode() != "online"
    return WandbLogger(project=project, group=group, name=name, job_type=job_type, tags=tags,
                       save_dir=str(run_dir), offline=offline, id=run_id, log_model=False)


def finish() -> None:
    """End the process's W&B run if there is one (also after a failure)."""
    import sys
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
