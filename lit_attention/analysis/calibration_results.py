"""The calibration tables as committed results: one CSV per table (results/calibration/), one row
per cell, holding what simulates that cell again (kind, seeds, ratio, experiments, pooled_arms,
seed) and the rates it gave.

docs/ANALYSIS.md's tables are formatted from these files (analysis/reproduce.py), the way its
other numbers come from committed run stores. analysis/calibrate.py writes a file by simulation,
and with --check simulates every cell of one again and compares; the suite simulates the
smallest cell of each committed file (tests/analysis/test_calibration_results.py), so a change
to the simulation that moves the numbers fails there.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, fields
from pathlib import Path

from lit_attention.analysis import block_calibration, calibration
from lit_attention.files import atomic_write

KINDS = {"seeds": calibration, "blocks": block_calibration}
PARAMETERS = ("kind", "seeds", "ratio", "experiments", "pooled_arms", "seed")


class CalibrationFileError(ValueError):
    """A calibration file that cannot be read as one table (the message names the file)."""


def rate_names(kind: str) -> list[str]:
    return [f.name for f in fields(KINDS[kind].Rates)]


def rates_of(row: dict):
    """The Rates of a cell's row (calibration.Rates or block_calibration.Rates, by its kind)."""
    kind = row["kind"]
    return KINDS[kind].Rates(**{name: row[name] for name in rate_names(kind)})


def simulate(kind: str, seeds: int, ratio: float, experiments: int = calibration.EXPERIMENTS,
             pooled_arms: int | None = None, seed: int = calibration.SEED) -> dict:
    """One cell: its parameters and the rates of its simulation (a row of a calibration file)."""
    if pooled_arms is not None and kind != "seeds":
        raise ValueError(f"pooled_arms is an option of the seeds calibration only, not of {kind}")
    options = {} if pooled_arms is None else {"pooled_arms": pooled_arms}
    rates = KINDS[kind].rates(seeds, ratio, experiments, seed=seed, **options)
    return dict(kind=kind, seeds=seeds, ratio=ratio, experiments=experiments, pooled_arms=pooled_arms,
                seed=seed, **asdict(rates))


def resimulate(row: dict) -> dict:
    """The row that simulating ``row``'s parameters gives now."""
    return simulate(**{key: row[key] for key in PARAMETERS})


def differences(committed: dict, fresh: dict, rel: float = 1e-9) -> dict:
    """{key: (committed, fresh)} of what differs between two rows of a cell. A rate is a share of
    experiments and must be equal; the MDE passes through BLAS and libm, whose last bits differ
    between CPUs, so it is compared to a relative ``rel``."""
    return {key: (committed[key], fresh[key]) for key in committed
            if not (committed[key] == fresh[key] or key == "detectable"
                    and abs(committed[key] - fresh[key]) <= rel * abs(committed[key]))}


def write(path: Path | str, rows: list[dict]) -> None:
    """Rows of one kind to CSV, floats as repr (they read back to the same numbers)."""
    kinds = {row["kind"] for row in rows}
    if len(kinds) != 1:
        raise ValueError(f"a calibration file holds one kind of table, not {sorted(kinds)}")
    out = io.StringIO()
    writer = csv.DictWriter(out, [*PARAMETERS, *rate_names(kinds.pop())], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: "" if value is None else repr(value) if isinstance(value, float) else value
                         for key, value in row.items()})
    atomic_write(path, out.getvalue())


def read(path: Path | str) -> list[dict]:
    """The rows of a calibration file, typed; CalibrationFileError names what is wrong."""
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            raw = list(csv.DictReader(f))
    except OSError as exc:
        raise CalibrationFileError(f"{path}: {exc.strerror or exc}") from exc
    if not raw:
        raise CalibrationFileError(f"{path}: no cells")
    kind = raw[0].get("kind")
    if kind not in KINDS:
        raise CalibrationFileError(f"{path}: kind {kind!r} is not one of {', '.join(KINDS)}")
    columns = [*PARAMETERS, *rate_names(kind)]
    if list(raw[0]) != columns:
        raise CalibrationFileError(f"{path}: columns {', '.join(raw[0])}; a {kind} table has {', '.join(columns)}")
    rows = []
    for line, row in enumerate(raw, 2):
        try:
            if row["kind"] != kind:
                raise ValueError(f"kind {row['kind']!r} in a {kind} table")
            rows.append(dict(kind=kind, seeds=int(row["seeds"]), ratio=float(row["ratio"]),
                             experiments=int(row["experiments"]),
                             pooled_arms=int(row["pooled_arms"]) if row["pooled_arms"] else None,
                             seed=int(row["seed"]), **{name: float(row[name]) for name in rate_names(kind)}))
        except (TypeError, ValueError) as exc:
            raise CalibrationFileError(f"{path}, line {line}: {exc}") from exc
    return rows


def markdown(rows: list[dict]) -> str:
    """The table: one row per variance ratio, one column per number of seeds."""
    kind = rows[0]["kind"]
    cells = {(row["seeds"], row["ratio"]): row for row in rows}
    seeds, ratios = sorted({n for n, _ in cells}), sorted({r for _, r in cells})
    missing = [f"{n} seeds at ratio {r:g}" for r in ratios for n in seeds if (n, r) not in cells]
    if missing or len(cells) != len(rows):
        raise CalibrationFileError(f"not one cell per seeds and ratio: {'missing ' + ', '.join(missing) if missing else 'a cell twice'}")
    lines = [f"| {KINDS[kind].LABEL} | " + " | ".join(f"{n} seeds" for n in seeds) + " |",
             "|" + "---:|" * (len(seeds) + 1)]
    for ratio in ratios:
        texts = [KINDS[kind].cell_text(rates_of(cells[n, ratio])) for n in seeds]
        lines.append(f"| {ratio:g} | " + " | ".join(texts) + " |")
    return "\n".join(lines)
