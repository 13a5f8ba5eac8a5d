"""Simulate a calibration table into results/calibration/, or simulate committed ones again.

    python analysis/calibrate.py results/calibration/seeds.csv seeds
    python analysis/calibrate.py results/calibration/seeds-pooled6.csv seeds --pooled-arms 6
    python analysis/calibrate.py results/calibration/blocks.csv blocks
    python analysis/calibrate.py --check results/calibration/*.csv   # exit 1 if a cell differs

`seeds`: the seed x sentence test; `blocks`: the language-model test over token blocks (both
simulated by calibration_sim.py beside this script). One row per cell (every number of
seeds at every variance ratio), each with what simulates it again; analysis/reproduce.py formats
docs/REPORT.md's tables from these files. Run --check after changing a simulation or the test
it calibrates (the three committed tables: a few CPU-minutes), and write the files again if the
change is meant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import calibration_sim as cs


def _numbers(kind: type):
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(v) for v in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma-separated list of {kind.__name__}: {text!r}") from None
        if not values or min(values) <= 0:
            raise argparse.ArgumentTypeError(f"every value must be positive: {text!r}")
        return values
    return parse


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return int(text)


def check(path: Path, cells: int | None = None) -> list[str]:
    """Simulate the first ``cells`` cells of a calibration file (all by default) again; the
    differences, one line each."""
    differences = []
    for row in cs.read(path)[:cells]:
        changed = cs.differences(row, cs.resimulate(row))
        if changed:
            differences.append(f"{path}: {row['seeds']} seeds at ratio {row['ratio']:g}: committed -> now {changed}")
    return differences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", nargs="+", type=Path, metavar="FILE",
                        help="simulate every cell of these files again; exit 1 if one differs")
    parser.add_argument("out", nargs="?", type=Path, help="the CSV to write")
    parser.add_argument("kind", nargs="?", choices=sorted(cs.KINDS))
    parser.add_argument("--seeds", type=_numbers(int), default=cs.SEEDS)
    parser.add_argument("--ratios", type=_numbers(float), default=cs.RATIOS)
    parser.add_argument("--experiments", type=_positive, default=cs.EXPERIMENTS)
    parser.add_argument("--pooled-arms", type=_positive, default=None,
                        help="seeds only: the seed variance pooled over this many arms")
    args = parser.parse_args(argv)
    if args.check:
        given = [f"--{name.replace('_', '-')}" for name in ("seeds", "ratios", "experiments", "pooled_arms")
                 if getattr(args, name) != parser.get_default(name)]
        if args.out or given:
            parser.error(f"--check simulates what each file says; it takes no {'OUT KIND' if args.out else given[0]}")
        try:
            differences = [line for path in args.check for line in check(path)]
        except cs.CalibrationFileError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print("\n".join(differences) or f"every cell of {len(args.check)} file(s) is what the simulation gives now")
        return 1 if differences else 0
    if args.out is None or args.kind is None:
        parser.error("give OUT and KIND (seeds or blocks), or --check FILE ...")
    try:
        rows = [cs.simulate_cell(args.kind, n, ratio, args.experiments, args.pooled_arms)
                for ratio in args.ratios for n in args.seeds]
    except ValueError as exc:          # an option the kind does not take: refused before it simulates
        parser.error(str(exc))
    cs.write(args.out, rows)
    print(f"{args.out}: {len(rows)} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
