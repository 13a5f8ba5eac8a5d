"""The training code's fingerprint moves with what training computes, not with comments."""

import shutil

from lit_attention.tracking import provenance


def copy_of_the_package(tmp_path):
    copy = tmp_path / "lit_attention"
    shutil.copytree(provenance.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_comments_docstrings_and_formatting_leave_it_a_statement_moves_it(tmp_path):
    package = copy_of_the_package(tmp_path)
    before = provenance.code_fingerprint(package)
    assert before == provenance.code_fingerprint()
    loss = package / "models" / "loss.py"
    text = loss.read_text()
    loss.write_text(text.replace('"""Label-smoothed', '"""Label smoothed', 1).replace(" = ", " =  ", 3)
                    + "# a comment\n")
    assert provenance.code_fingerprint(package) == before
    loss.write_text(text.replace("BLOCK_FLOATS = 2 ** 17", "BLOCK_FLOATS = 2 ** 16"))
    assert provenance.code_fingerprint(package) != before


def test_guards_and_record_keeping_are_not_training_code(tmp_path):
    package = copy_of_the_package(tmp_path)
    before = provenance.code_fingerprint(package)
    for name in provenance.NOT_TRAINING:
        (package / name).write_text((package / name).read_text() + "\nX = 1\n")
    (package / "analysis" / "report.py").write_text("X = 1\n")
    assert provenance.code_fingerprint(package) == before
    (package / "lightning" / "optim.py").write_text((package / "lightning" / "optim.py").read_text() + "\nX = 1\n")
    assert provenance.code_fingerprint(package) != before


def test_every_listed_path_exists():
    for part in provenance.TRAINING_CODE + provenance.NOT_TRAINING:
        assert (provenance.PACKAGE / part).exists(), part


def test_machine_names_the_kernel_set_and_cores():
    import torch
    text = provenance.machine()
    assert f"({torch.backends.cpu.get_cpu_capability()})" in text and text.endswith("cores")
