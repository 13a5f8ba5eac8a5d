"""The search space: parameters with conditions, sampled through an Optuna trial or enumerated.

A parameter is active only when all its conditions hold on the parameters before it, so
`model.heads` exists only for Transformers and `model.scoring` only when attention is on; an inactive
parameter is simply absent from the trial (the base config's value applies).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Condition:
    name: str
    values: tuple
    negate: bool = False

    def holds(self, params: dict) -> bool:
        # False when the parameter it depends on is itself inactive
        return self.name in params and (params[self.name] in self.values) != self.negate


@dataclass(frozen=True)
class Param:
    name: str
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    type: str = "choice"  # choice | int | float
    when: tuple[Condition, ...] = ()

    @property
    def finite(self) -> bool:
        return self.choices is not None or self.type == "int" or self.step is not None

    def values(self) -> list:
        """Every value of a finite parameter, in order."""
        if self.choices is not None:
            return list(self.choices)
        cast = int if self.type == "int" else lambda v: round(v, 12)
        return [cast(self.low + i * (self.step or 1)) for i in range(self.size())]

    def size(self) -> int:
        """len(self.values()), computed without enumerating them (a finite parameter)."""
        if self.choices is not None:
            return len(self.choices)
        return int(math.floor((self.high - self.low) / (self.step or 1) + 1e-9)) + 1

    def probe_values(self, space: list[Param]) -> list:
        """A few values standing for all of them when checking ``space``: every choice; of a range
        its bounds, its second step and the values that conditions of ``space`` test."""
        if self.choices is not None:
            return list(self.choices)
        cast = int if self.type == "int" else float
        out = [self.low, self.high] + ([self.low + self.step] if self.step else [])
        out += [v for p in space for c in p.when if c.name == self.name
                for v in c.values if self.can_take(v)]
        return list(dict.fromkeys(cast(v) for v in out))

    def can_take(self, value: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        return isinstance(value, (int, float)) and self.low <= value <= self.high

    def active(self, params: dict) -> bool:
        return all(c.holds(params) for c in self.when)

    def suggest(self, trial) -> Any:
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.type == "int":
            return trial.suggest_int(self.name, self.low, self.high, step=self.step or 1, log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)


def suggest(trial, space: list[Param]) -> dict:
    """Sample the active parameters of `space` through `trial` (fixed/enqueued values win)."""
    params: dict = {}
    for p in space:
        if p.active(params):
            params[p.name] = p.suggest(trial)
    return params


def grid(space: list[Param]) -> list[dict]:
    """The full factorial over the active parameters, in declaration order (first varies slowest)."""
    cells: list[dict] = [{}]
    for p in space:
        cells = [grown for cell in cells for grown in
                 ([{**cell, p.name: v} for v in p.values()] if p.active(cell) else [cell])]
    return cells


def count(space: list[Param], limit: int) -> int:
    """The number of configurations ``grid(space)`` has, without enumerating them.

    Only the values of parameters that conditions look at are tracked; every other parameter
    multiplies the count. Returns ``limit + 1`` as soon as the count is known to exceed ``limit``.
    """
    referenced = {c.name for p in space for c in p.when}
    states: dict[tuple, int] = {(): 1}
    for p in space:
        grown: dict[tuple, int] = defaultdict(int)
        for state, n in states.items():
            if not p.active(dict(state)):
                grown[state] += n
            elif p.name in referenced:
                if p.size() > limit:
                    return limit + 1
                for v in p.values():
                    grown[state + ((p.name, v),)] += n
            else:
                grown[state] += n * p.size()
        states = grown
        if len(states) > limit or sum(states.values()) > limit:
            return limit + 1
    return sum(states.values())


def probe_grid(space: list[Param], limit: int = 10_000) -> list[dict]:
    """The grid of the space with every parameter reduced to its probe values (a small grid to
    check); empty when even that grid has more than ``limit`` configurations."""
    small = [replace(p, choices=tuple(p.probe_values(space)), low=None, high=None, step=None,
                     log=False, type="choice") for p in space]
    return grid(small) if count(small, limit) <= limit else []


def probe_cells(space: list[Param], limit: int = 10_000) -> list[dict]:
    """Configurations of the probe space that together use every probe value of every parameter
    (a few, not the whole grid); empty when even the probe grid is larger than ``limit``."""
    chosen, seen = [], set()
    for cell in probe_grid(space, limit):
        if new := {(k, json.dumps(v)) for k, v in cell.items()} - seen:
            chosen.append(cell)
            seen |= new
    return chosen


def config_key(params: dict) -> str:
    """A canonical string for one configuration (parameters without the seed)."""
    return json.dumps({k: v for k, v in sorted(params.items()) if k != "seed"}, sort_keys=True)


def cell_key(params: dict, seed: int) -> str:
    """A canonical string for one configuration x seed cell."""
    return f"{config_key(params)}|seed={seed}"
