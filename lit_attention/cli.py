"""`lit-attention fit|validate|test|translate|choices|sweep|report`: which module runs each command.

Training goes through LightningCLI (lit_attention/lightning/cli.py); every run lands in the run
store (`<run.root>/<run.group>/<run.id>/`) whatever the tracking choice.
"""

from __future__ import annotations

import importlib
import json
import sys

from lit_attention import registry
from lit_attention.config_check import unknown_option

TRAINING_COMMANDS = ("fit", "validate", "test")
# the other commands: the module whose main(ARGS) runs `lit-attention COMMAND ARGS`
MODULES = {"translate": "lit_attention.lightning.translate", "sweep": "lit_attention.sweep.cli",
           "report": "lit_attention.analysis.report"}


CHOICES_USAGE = """usage: lit-attention choices [--json]

The registry: model families and their options, cells, scoring functions, positional encodings,
tasks, tokenizers and tracking, then every config key whose value is one of a list, by kind of
model. --json: the same as one JSON object."""


def _choices(argv: list[str]) -> int:
    if argv in (["-h"], ["--help"]):
        print(CHOICES_USAGE)
        return 0
    for arg in argv:
        if arg != "--json":
            print(f"lit-attention choices: error: {unknown_option(arg, ['--json'])}", file=sys.stderr)
            return 2
    # the registry's tables, then every config key whose value is a choice, by kind of model
    config = registry.CONFIG_CHOICES
    data = {**registry.as_dict(), "tracking": list(registry.TRACKING), "config": config}
    if "--json" in argv:
        print(json.dumps(data, indent=2))
    else:
        rows = {**{k: v for k, v in data.items() if k != "config"},
                **{f"{kind} {key}": values for kind, keys in config.items() for key, values in keys.items()}}
        width = max(map(len, rows))
        for key, values in rows.items():
            if isinstance(values, dict):   # family -> its options; former name -> new name
                values = [f"{k} ({', '.join(v)})" if isinstance(v, dict) else f"{k} -> {v}"
                          for k, v in values.items()]
            print(f"{key:{width}s}  {', '.join(values)}")
    return 0


USAGE = """usage: lit-attention {fit,validate,test,translate,choices,sweep,report} ...

  fit|validate|test   train or evaluate (LightningCLI; `lit-attention fit --help`)
  translate RUN_DIR   translate stdin (or --input FILE) with a trained run: hypotheses to stdout
  choices [--json]    the registry of families, cells, scoring functions, positional encodings, tasks
  sweep FILE          run an Optuna study declared in a sweep YAML file
  report RUNS_DIR     tables and plots from a run store
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    if command == "choices":
        return _choices(argv[1:])
    if command in MODULES:
        return importlib.import_module(MODULES[command]).main(argv[1:])
    if command in TRAINING_COMMANDS:
        from lit_attention.lightning.cli import train
        return train(argv)
    if command == "predict":
        print("lit-attention predict: error: there is no predict command: to decode new text, run "
              "`lit-attention translate RUN_DIR < FILE` (hypotheses to stdout, one line per input line)",
              file=sys.stderr)
        return 2
    if command and command not in ("-h", "--help"):
        commands = (*TRAINING_COMMANDS, "choices", *MODULES)
        print(f"lit-attention: error: {unknown_option(command, commands, 'command')}", file=sys.stderr)
        print(f"commands: {', '.join(commands)} (lit-attention --help)", file=sys.stderr)
        return 2
    print(USAGE, file=sys.stderr if command not in ("-h", "--help") else sys.stdout)
    return 0 if command in ("-h", "--help") else 2


if __name__ == "__main__":
    sys.exit(main())
