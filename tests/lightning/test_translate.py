"""`lit-attention translate`: hypotheses of new text from a trained run, exactly as its validation
(greedy) and its `test` (the run's beam) decode; a run it cannot translate with is one line, exit 2."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from conftest import CONFIGS, REPO, cli_env, cli_in_process
from lit_attention.data.tokenizers import build_tokenizers, tokenizer_digest
from lit_attention.data.translation import TranslationDataModule
from lit_attention.lightning.checksum import CHECKSUM_KEY, content_checksum
from lit_attention.lightning.translation import TranslationModule
from lit_attention.sweep import evaluate
from lit_attention.tracking.schema import write_summary

TINY = ["--data.n_train", "300", "--data.n_val", "40", "--data.n_test", "40", "--model.d_model", "32",
        "--model.ffn", "64", "--model.enc_layers", "1", "--model.dec_layers", "1",
        "--trainer.enable_progress_bar", "false"]


def translate(*args, **kw):
    return cli_in_process("translate", *args, **kw)


def one_line_error(result, *words):
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 500 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("lit-attention translate: error: ")
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A TINY toy-mt model trained one epoch (its beam settings matter only to `test`), then tested
    as `sweep --test` tests a run: its config.yaml and best checkpoint."""
    root = tmp_path_factory.mktemp("translate")
    fit = cli_in_process("fit", "--config", CONFIGS / "copy.yaml", "--run.root", root, "--run.id", "d",
                         "--data.task", "toy-mt", "--trainer.max_epochs", "1", "--diagnostics.heatmaps", "0", "--model.beam_size", "2",
                         "--model.length_penalty", "0.5", "--data.cache_dir", root / "cache", *TINY)
    assert fit.returncode == 0, fit.stderr[-2000:]
    run_dir = root / "default" / "d"
    test = cli_in_process(*evaluate.command(run_dir)[3:])
    assert test.returncode == 0, test.stderr[-2000:]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    data = TranslationDataModule(**config["data"]["init_args"])
    for split in ("val", "test"):
        (root / f"{split}.src").write_text("".join(line + "\n" for line in data.sources(split)))
    return run_dir


@pytest.mark.slow
def test_beam_1_on_the_validation_sources_gives_the_hypotheses_validation_wrote(trained):
    """stdin to stdout, in a process of its own: greedy, as validation decodes, with the same weights
    (one epoch: the best checkpoint holds the weights of the one validation)."""
    sources = (trained.parents[1] / "val.src").read_bytes()
    done = subprocess.run([sys.executable, "-m", "lit_attention.cli", "translate", str(trained), "--beam", "1"],
                          input=sources, capture_output=True, cwd=REPO, env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == (trained / "hyps" / "val.txt").read_bytes()
    assert done.stdout.count(b"\n") == 40 and len(set(done.stdout.splitlines())) > 5, done.stdout
    assert b"greedy" in done.stderr and b"Automatic Mixed Precision" not in done.stderr


@pytest.mark.slow
def test_defaults_give_what_test_wrote(trained, tmp_path):
    """The run's beam (2) and length penalty (0.5), its precision and batches: `test`'s hypotheses."""
    out = tmp_path / "out" / "test.hyp"
    done = translate(trained / "checkpoints" / "best.ckpt", "--input", trained.parents[1] / "test.src",
                     "--output", out)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "" and "beam 2" in done.stderr
    assert out.read_bytes() == (trained / "hyps" / "test.txt").read_bytes()
    summary = json.loads((trained / "summary.json").read_text())
    assert summary["test_decoding"]["beam_size"] == 2 and summary["test_decoding"]["length_penalty"] == 0.5


# -- runs written as fit writes them, with an untrained model: the refusals and the fuzz ------------

WORDS = "a b c d e f g h".split()


def untrained_run(root: Path) -> Path:
    """A run directory holding what translate reads of one: config.yaml, summary.json with the
    tokenizer's digest, a checksummed best checkpoint of a tiny Transformer (never trained)."""
    run_dir = root / "default" / "u"
    lines = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(len(WORDS))]
    src, tgt = build_tokenizers("word", lines, lines, cache_dir=str(root / "cache"))
    module = TranslationModule(family="transformer", positional="sinusoidal", d_model=16, heads=2, ffn=32,
                               enc_layers=1, dec_layers=1, src_vocab_size=src.vocab_size,
                               tgt_vocab_size=tgt.vocab_size)
    module.configure_model()
    checkpoint = {"hyper_parameters": dict(module.hparams), "state_dict": module.state_dict()}
    checkpoint[CHECKSUM_KEY] = content_checksum(checkpoint)
    (run_dir / "checkpoints").mkdir(parents=True)
    torch.save(checkpoint, run_dir / "checkpoints" / "best.ckpt")
    config = yaml.safe_load((CONFIGS / "copy.yaml").read_text())
    config["model"]["init_args"].update(beam_size=2, length_penalty=0.5)
    config["trainer"]["precision"] = "32-true"
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    write_summary(run_dir, {"run_id": "u", "status": "finished",
                            "tokenizer_digest": tokenizer_digest({"src": src, "tgt": tgt})})
    return run_dir


@pytest.fixture
def run(tmp_path):
    return untrained_run(tmp_path)


def test_empty_input_gives_empty_output(run, tmp_path):
    (tmp_path / "empty.txt").write_text("")
    done = translate(run, "--input", tmp_path / "empty.txt")
    assert done.returncode == 0 and done.stdout == "", done.stderr


def test_a_language_model_run_is_refused(run):
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["model"]["class_path"] = "lit_attention.lightning.lm.LanguageModelModule"
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    one_line_error(translate(run), "LanguageModelModule run, not an encoder-decoder translation run")


def test_a_missing_checkpoint_is_refused(run, tmp_path):
    (run / "checkpoints" / "best.ckpt").unlink()
    one_line_error(translate(run), "best.ckpt: no such file")
    one_line_error(translate(tmp_path / "nothing"), "no such run directory or checkpoint")
    (tmp_path / "loose.ckpt").write_bytes(b"")
    one_line_error(translate(tmp_path / "loose.ckpt"), "not a checkpoint in a run directory's checkpoints/")


def test_a_missing_or_changed_tokenizer_is_refused(run):
    path = Path(json.loads((run / "summary.json").read_text())["tokenizer_digest"]["src"]["path"])
    header, _, body = path.read_text().partition("\n")       # the cache's header line, then the vocabulary
    saved = json.loads(body)
    path.write_text(header + "\n" + json.dumps({**saved, "itos": saved["itos"] + ["new"]}))
    one_line_error(translate(run), str(path), "differs from the one it trained with")
    path.unlink()
    one_line_error(translate(run), str(path), "cannot be read (No such file or directory)")


def test_a_run_that_recorded_no_tokenizer_digest_is_refused(run):
    summary = json.loads((run / "summary.json").read_text())
    del summary["tokenizer_digest"]
    (run / "summary.json").write_text(json.dumps(summary))
    one_line_error(translate(run), "records no tokenizer_digest")


@pytest.mark.parametrize("args, words", [
    (["--beam", "0"], ["--beam must be >= 1"]),
    (["--beam", "x"], ["--beam: invalid int value"]),
    (["--accelerator", "tpux"], ["--accelerator tpux: not an accelerator name"]),
    (["--bean", "2"], ["unrecognized arguments: --bean"]),
])
def test_bad_options_are_one_line(run, args, words):
    one_line_error(translate(run, *args), *words)


def test_an_output_that_cannot_be_written_is_refused_before_any_work(run, tmp_path):
    (tmp_path / "a-file").write_text("")
    done = translate(run, "--output", tmp_path / "a-file" / "hyps.txt")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"lit-attention translate: error: cannot write {tmp_path / 'a-file'}: ")
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_stdin_that_is_not_utf8_is_named_as_stdin(run):
    done = subprocess.run([sys.executable, "-m", "lit_attention.cli", "translate", str(run)],
                          input=b"a b\nc \xff d\n", capture_output=True, cwd=REPO, env=cli_env(), timeout=300)
    assert done.returncode == 2 and done.stdout == b""
    assert done.stderr.decode().strip() == ("lit-attention translate: error: <stdin>, line 2: not valid UTF-8 "
                                            "(invalid start byte at byte 2)")


def test_fuzz_every_input_line_gives_one_output_line(run, tmp_path):
    """Random lines (any Unicode, empty, blank, long, byte-order marks, NUL bytes, invalid UTF-8,
    each ended by LF, CR LF or a lone CR):
    exit 0 with one hypothesis per line, or exit 2 in one line, writing nothing, when a line cannot
    be translated (more tokens than the model's 512 positions, a NUL byte, not UTF-8)."""
    rng = random.Random(54)
    pieces = [*WORDS, "", " ", "\t", "\ufeff", "é", "\u2028", "\x85", "\x0c", "字", "😀", "  ", "<unk>",
              "</s>", "\\", "\"", *(chr(c) for c in rng.sample(range(0x20, 0x2FFFF), 8) if not 0xD800 <= c < 0xE000)]
    out = tmp_path / "out.txt"
    for _ in range(30):
        lines = [" ".join(rng.choice(pieces) for _ in range(rng.choice([0, 1, 3, 10, 40, 120, 800])))
                 for _ in range(rng.randrange(0, 6))]
        if lines and rng.random() < 0.15:
            lines[rng.randrange(len(lines))] += rng.choice(["\x00", "\udcff"])   # NUL, or the byte 0xff
        # any line end the data reader takes: LF, CR LF or a lone CR
        data = b"".join(line.encode("utf-8", "surrogateescape") + rng.choice([b"\n", b"\r\n", b"\r"])
                        for line in lines)
        (tmp_path / "in.txt").write_bytes(data)
        out.unlink(missing_ok=True)
        done = translate(run, "--input", tmp_path / "in.txt", "--output", out)
        tokens = [len(line.lstrip("\ufeff").split()) for line in lines]
        if b"\x00" in data or b"\xff" in data or any(n + 1 > 512 for n in tokens):
            one_line_error(done)
            assert not out.exists()
        else:
            assert done.returncode == 0, (lines, done.stderr)
            text = out.read_bytes().decode("utf-8")
            assert text.count("\n") == len(lines) and text.split("\n")[-1] == "", (lines, text)
