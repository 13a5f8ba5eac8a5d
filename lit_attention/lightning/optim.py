"""The optimizer and learning-rate schedules of both Lightning modules.

``adam`` is Adam or AdamW, fused where the device allows. The fused implementation updates all
parameters in one kernel instead of a dozen small ops per tensor, less than half the time of a
small Transformer's optimizer step on a CPU. Only 16-mixed keeps
the per-tensor implementation: its gradient scaler must unscale before clipping, which a fused
optimizer does inside its step. bf16-mixed has no scaler; the modules clip its gradients
themselves (base.SequenceModule.configure_gradient_clipping).

A schedule is a function of the optimizer step (0-based) giving the factor on the base rate;
``stepwise`` hands one to Lightning, applied after every optimizer step.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from lightning.pytorch import LightningModule

from lit_attention.lightning.steps import attached_trainer

Schedule = Callable[[int], float]


def adam(module: LightningModule, lr: float, betas, weight_decay: float,
         decoupled: bool = False) -> torch.optim.Optimizer:
    trainer = attached_trainer(module)
    precision = str(trainer.precision) if trainer is not None else "32-true"
    fused = module.device.type in ("cpu", "cuda") and precision != "16-mixed"
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    return cls(module.parameters(), lr=lr, betas=tuple(betas), weight_decay=weight_decay, fused=fused)


def stepwise(optimizer: torch.optim.Optimizer, schedule: Schedule) -> dict:
    """What ``configure_optimizers`` returns: ``optimizer`` with its rate scaled by ``schedule``."""
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def inverse_sqrt_warmup(warmup: int) -> Schedule:
    """Linear warm-up to the base rate, then decay with 1/sqrt(step) (the Transformer paper's)."""
    def factor(step: int) -> float:
        step = step + 1
        return min(step / max(warmup, 1), math.sqrt(max(warmup, 1) / step))
    return factor


def warmup_cosine(warmup: int, total: int, floor: float = 0.1) -> Schedule:
    """Linear warm-up to the base rate, then cosine decay to ``floor`` of it at ``total`` steps."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if total <= warmup:
            return 1.0
        progress = min((step - warmup) / (total - warmup), 1.0)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return factor
