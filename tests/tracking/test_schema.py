"""The run-store format (tracking/schema.py): summary.json round trip, its version, old summaries,
statuses (every one a real fit writes), the STOP file, and that nobody else spells its names."""

import ast
import json
import math
import signal

import pytest

from conftest import CONFIGS, REPO, cli_env, cli_in_process, run_cli
from lit_attention.tracking import schema
from lit_attention.tracking.schema import (Status, SummaryError, read_summary, request_stop,
                                           stop_request, update_summary, write_summary)

COMMITTED = sorted((REPO / "results" / "demo").glob("*/summary.json"))[:2]


def test_round_trip_writes_the_version_first_and_reads_back_the_same_fields(tmp_path):
    fields = {"run_id": "r", "group": "g", "status": Status.RUNNING, "model": {"family": "rnn"},
              "seed": 3, "val_bleu": 12.5, "val_ppl": math.inf, "machine_gflops_probes": [1.0, 2.0]}
    written = write_summary(tmp_path, fields)
    raw = json.loads((tmp_path / "summary.json").read_text())
    assert list(raw)[0] == "version" and raw["version"] == schema.VERSION
    assert raw["status"] == "running" and raw["val_ppl"] is None     # non-finite -> null
    read = read_summary(tmp_path)
    assert dict(read) == raw == dict(written)
    assert read.status is Status.RUNNING and read.reason is None and read.path == tmp_path / "summary.json"


def test_update_merges_and_accepts_a_field_named_run_dir(tmp_path):
    update_summary(tmp_path, run_dir=str(tmp_path), status="running")
    summary = update_summary(tmp_path, status=Status.FAILED, error="RuntimeError: boom")
    assert summary["run_dir"] == str(tmp_path) and summary.status is Status.FAILED
    assert summary.reason == "RuntimeError: boom" and read_summary(tmp_path)["version"] == schema.VERSION


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_summaries_without_a_version_are_read_as_the_current_one(path, tmp_path):
    raw = {k: v for k, v in json.loads(path.read_text()).items() if k != "version"}   # as before versions
    (tmp_path / "summary.json").write_text(json.dumps(raw))
    summary = read_summary(tmp_path)
    assert summary["version"] == schema.VERSION and summary.status is Status.FINISHED
    assert {k: v for k, v in summary.items() if k != "version"} == raw   # nothing else changes


def test_version_0_buckets_without_a_unit_counted_tokens(tmp_path):
    buckets = [{"bucket": "1-10", "n": 5, "bleu": 1.0}, {"bucket": "11+", "n": 5, "unit": "words"}]
    (tmp_path / "summary.json").write_text(json.dumps({"status": "finished", "val_bleu_by_length": buckets}))
    assert [b["unit"] for b in read_summary(tmp_path)["val_bleu_by_length"]] == ["tokens", "words"]


@pytest.mark.parametrize("version, problem", [
    (schema.VERSION + 1, f"newer than this lit-attention reads ({schema.VERSION}): upgrade lit-attention"),
    ("1", "field 'version' is '1', not a format version"),
    (True, "field 'version' is True, not a format version"),
    (-1, "field 'version' is -1, not a format version"),
])
def test_an_unknown_version_is_refused_naming_the_file_and_what_to_do(tmp_path, version, problem):
    (tmp_path / "summary.json").write_text(json.dumps({"version": version, "status": "finished"}))
    with pytest.raises(SummaryError) as refused:
        read_summary(tmp_path)
    message = str(refused.value)
    assert message.startswith(f"{tmp_path / 'summary.json'}: ") and problem in message, message


def test_an_unknown_status_is_refused_on_read_and_on_write(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed"}))
    with pytest.raises(SummaryError, match=r"summary\.json: unknown status 'completed' \(known: running, "
                                           r"finished, pruned, failed, interrupted, killed\)"):
        read_summary(tmp_path)
    before = (tmp_path / "summary.json").read_text()
    with pytest.raises(SummaryError, match="unknown status 'done'"):
        write_summary(tmp_path, {"status": "done"})
    assert (tmp_path / "summary.json").read_text() == before          # nothing written
    with pytest.raises(SummaryError, match="unknown status 'done'"):
        update_summary(tmp_path / "new", status="done")
    assert not (tmp_path / "new").exists()


def test_writers_are_held_to_every_field_type_readers_only_to_the_shape(tmp_path):
    for field, value in (("steps", "10"), ("seed", 1.5), ("val_bleu", "n/a"), ("model", "rnn"),
                         ("params", True)):
        with pytest.raises(SummaryError, match=f"field '{field}' is"):
            write_summary(tmp_path, {field: value})
    assert not (tmp_path / "summary.json").exists()
    # A metric holding text is read (the report counts it as an invalid value of that run) ...
    (tmp_path / "summary.json").write_text(json.dumps({"status": "finished", "val_bleu": "n/a"}))
    assert read_summary(tmp_path)["val_bleu"] == "n/a"
    # ... a summary whose structure is wrong is not.
    (tmp_path / "summary.json").write_text(json.dumps({"status": "finished", "model": "rnn"}))
    with pytest.raises(SummaryError, match="field 'model' is a string, not an object"):
        read_summary(tmp_path)


def test_missing_summary(tmp_path):
    with pytest.raises(SummaryError, match="summary.json: does not exist"):
        read_summary(tmp_path)
    assert dict(read_summary(tmp_path, missing_ok=True)) == {}


def test_every_ended_status_names_its_reason_field():
    assert Status.RUNNING.reason_field is None
    assert {s: s.reason_field for s in Status if s is not Status.RUNNING} == {
        Status.FINISHED: "stopped_by", Status.PRUNED: "stopped_by", Status.FAILED: "error",
        Status.INTERRUPTED: "error", Status.KILLED: "error"}
    assert f"{Status.PRUNED}" == str(Status.PRUNED) == "pruned" == Status.PRUNED


def test_the_stop_file_names_the_status_exactly(tmp_path):
    assert stop_request(tmp_path) is None
    request_stop(tmp_path)
    assert stop_request(tmp_path) == (Status.PRUNED, "pruned")
    for text, expected in (("", (Status.FINISHED, "stopped")),                    # touch STOP
                           ("enough\n", (Status.FINISHED, "enough")),
                           ("finished\nby hand", (Status.FINISHED, "finished\nby hand")),
                           ("not pruned, just stopped", (Status.FINISHED, "not pruned, just stopped"))):
        (tmp_path / schema.STOP).write_text(text)
        assert stop_request(tmp_path) == expected
    with pytest.raises(ValueError, match="a STOP file asks for one of pruned, finished"):
        request_stop(tmp_path, Status.FAILED)


def test_generated_run_ids_are_safe_names():
    assert schema.check_name("--run.id", schema.trial_run_id(7, 1)) == "t0007-s1"
    assert schema.check_name("--run.id", schema.new_run_id())


# -- every status the writers produce, from real tiny fits ------------------------------------------

TINY = ["--config", CONFIGS / "copy.yaml", "--data.n_train", "200", "--data.n_val", "20",
        "--data.n_test", "20", "--model.d_model", "16", "--model.ffn", "32", "--model.enc_layers", "1",
        "--model.dec_layers", "1", "--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "2",
        "--diagnostics.heatmaps", "0", "--diagnostics.gradflow_every", "0"]

SCENARIOS = {   # run id -> (extra arguments, exit code, status, what its reason says)
    "finished": ([], 0, Status.FINISHED, "max_epochs"),
    "pruned": ([], 0, Status.PRUNED, "STOP file: pruned"),      # its STOP file exists before it starts
    "failed": (["--model.lr", "1e30", "--model.warmup", "1", "--trainer.gradient_clip_val", "0"], 1,
               Status.FAILED, "non-finite"),
    "interrupted": (["--trainer.callbacks+=interrupt.SignalAfterSteps", "--trainer.callbacks.steps", "2"],
                    143, Status.INTERRUPTED, "SIGTERM"),
    "running": (["--trainer.callbacks+=interrupt.SigkillAtFirstValidation"], -signal.SIGKILL,
                Status.RUNNING, None),
}


@pytest.mark.slow
@pytest.mark.parametrize("run_id", SCENARIOS)
def test_every_status_a_fit_writes_is_in_the_enum_with_its_reason(tmp_path, run_id):
    extra, code, status, reason = SCENARIOS[run_id]
    run_dir = schema.run_path(tmp_path, "default", run_id)
    if run_id == "pruned":
        run_dir.mkdir(parents=True)
        request_stop(run_dir)
    # A signal needs a process of its own; the other statuses are what fit writes, in this process.
    run = run_cli if run_id in ("interrupted", "running") else cli_in_process
    done = run("fit", *TINY, "--run.root", tmp_path, "--run.id", run_id, *extra,
               env=cli_env(PYTHONPATH=str(REPO / "tests")))
    assert done.returncode == code, done.stderr[-2000:]
    summary = read_summary(run_dir)                    # refuses any status outside the enum
    assert summary["version"] == schema.VERSION and summary.status is status
    if reason is None:
        assert summary.reason is None and summary["heartbeat_at"]
    else:
        assert reason in summary.reason, summary.reason
    if status is Status.PRUNED:
        assert summary["epochs"] < 2                   # stopped at its first validation end


# -- nobody else spells the run store's names ---------------------------------------------------------

OWN_LITERALS = {schema.SUMMARY, schema.STOP, schema.CLAIM, schema.RUN_ID_ENV}


def _string_literals(tree: ast.AST):
    """(line, text) of every string constant that is not a docstring."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def test_only_the_schema_spells_summary_json_stop_claim_and_the_run_id_variable():
    own = REPO / "lit_attention" / "tracking" / "schema.py"
    found = []
    for path in sorted([*(REPO / "lit_attention").rglob("*.py"), *(REPO / "analysis").glob("*.py")]):
        if path == own:
            continue
        for line, text in _string_literals(ast.parse(path.read_text(), str(path))):
            if any(text == name or text.endswith(f"/{name}") for name in OWN_LITERALS):
                found.append(f"{path.relative_to(REPO)}:{line}: {text!r}")
    assert not found, "use lit_attention.tracking.schema's names instead:\n" + "\n".join(found)
