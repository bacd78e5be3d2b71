"""Every output of every command is checked before any work: its folder exists and takes a
new file (tried, not asked: root passes os.access for a read-only folder), its name fits the
file system (with OUT.onnx.data for a model), a symbolic link is followed to where the file
lands, and an existing target is a regular file. A failed check is exit 2 and one line;
nothing is created."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import onnx
import pytest

from eqsat.demo import build_model

from .test_cli import error_line, run_cli

# What each command does first once its outputs are accepted: replaced by a function that
# fails the test, so that a check that comes after any work is seen.
WORK = {"optimize": "eqsat.io.modelio.read_model", "plan": "eqsat.io.modelio.read_model",
        "show": "eqsat.io.modelio.read_model", "diff": "eqsat.io.modelio.read_model",
        "compare-costs": "eqsat.io.modelio.read_model", "calibrate": "eqsat.backends.ort.calibrate.write",
        "conformance": "eqsat.cli.conformance.run_conformance", "extract": "eqsat.cli.extract.load_egraph",
        "rules": "eqsat.cli.rules._check"}

COMMANDS = [["optimize", "{m}", "-o", "{out}"], ["optimize", "{m}", "--report", "{out}"],
            ["optimize", "{m}", "--plan", "{out}"], ["optimize", "{m}", "--save-egraph", "{out}"],
            ["compare-costs", "{m}", "--json", "{out}"], ["plan", "{m}", "-o", "{out}"],
            ["show", "{m}", "--html", "{out}"], ["show", "{m}", "--svg", "{out}"],
            ["diff", "{m}", "{m}", "--html", "{out}"], ["extract", "{g}", "-o", "{out}"],
            ["calibrate", "-o", "{out}"], ["rules", "check", "{r}", "--json", "{out}"],
            ["conformance", "--json", "{out}"]]


@pytest.fixture
def inputs(tmp_path) -> dict[str, Path]:
    d = tmp_path / "in"
    d.mkdir()
    onnx.save(build_model(), str(d / "m.onnx"))
    (d / "g.json").write_text("{}")
    (d / "r.egg").write_text('(ruleset r)\n(rewrite (Relu (Relu x)) (Relu x) :ruleset r :name "relu-relu")\n')
    return {"m": d / "m.onnx", "g": d / "g.json", "r": d / "r.egg"}


def _no_work(monkeypatch) -> None:
    import importlib

    for target in set(WORK.values()):
        module, name = target.rsplit(".", 1)

        def started(*a, _t=target, **k):
            raise AssertionError(f"the work started ({_t}) before the outputs were checked")

        monkeypatch.setattr(importlib.import_module(module), name, started)


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def refusing_folder(tmp_path):
    """A folder in which creating a file fails for whoever runs the tests: read-only by
    its mode, or, for root (whom modes do not stop), immutable (chattr +i)."""
    d = tmp_path / "ro"
    d.mkdir()
    (d / "m.onnx").write_bytes(onnx.shape_inference.infer_shapes(build_model()).SerializeToString())
    if os.geteuid() == 0:
        p = subprocess.run(["chattr", "+i", str(d)], capture_output=True)
        undo = ["chattr", "-i", str(d)]
    else:
        os.chmod(d, 0o555)
        p, undo = subprocess.CompletedProcess([], 0), None
    try:
        fd = os.open(d / "probe", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except OSError:
        pass  # refused, as it must be
    else:
        os.close(fd)
        os.unlink(d / "probe")
        p.returncode = p.returncode or 1
    if p.returncode:
        if undo:
            subprocess.run(undo, capture_output=True)
        pytest.skip("running as root, and this file system cannot make a folder immutable (chattr +i)")
    yield d
    if undo:
        subprocess.run(undo, capture_output=True)
    else:
        os.chmod(d, 0o755)


def _bad_outputs(tmp_path: Path, ro: Path) -> list[tuple[str, Path, str]]:
    """(case, output path, what its one error line must say)."""
    (tmp_path / "fifo").parent.mkdir(exist_ok=True)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to_ro.json").symlink_to(ro / "o.json")
    (tmp_path / "to_missing.json").symlink_to(tmp_path / "missing" / "o.json")
    (tmp_path / "loop1.json").symlink_to(tmp_path / "loop2.json")
    (tmp_path / "loop2.json").symlink_to(tmp_path / "loop1.json")
    (tmp_path / "dir").mkdir()
    (tmp_path / "to_dir").symlink_to(tmp_path / "dir")
    long = tmp_path / ("a" * 300 + ".json")
    return [
        ("name too long", long, f"{long}: the file name is too long (305 bytes; {tmp_path} allows 255)"),
        ("folder missing", tmp_path / "missing" / "o.json",
         f"{tmp_path / 'missing' / 'o.json'}: the output folder {tmp_path / 'missing'} does not exist"),
        ("read-only folder", ro / "o.json", f"{ro / 'o.json'}: the output folder {ro} is not writable"),
        ("link into a read-only folder", tmp_path / "to_ro.json", f"{tmp_path / 'to_ro.json'}: the output folder "
                                                                    f"{ro} is not writable"),
        ("link into a missing folder", tmp_path / "to_missing.json",
         f"{tmp_path / 'to_missing.json'}: the output folder {tmp_path / 'missing'} does not exist"),
        ("link loop", tmp_path / "loop1.json", f"{tmp_path / 'loop1.json'}: a symbolic link that leads nowhere"),
        ("a folder", tmp_path / "dir", f"{tmp_path / 'dir'} is a folder; give a file name"),
        ("link to a folder", tmp_path / "to_dir", f"{tmp_path / 'to_dir'} is a folder; give a file name"),
        ("a pipe", tmp_path / "fifo", f"{tmp_path / 'fifo'}: not a regular file; give a file name"),
    ]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:-1]))
def test_every_output_is_checked_before_any_work(capsys, tmp_path, monkeypatch, inputs, refusing_folder,
                                                 command):
    # an explicit -o was checked for a writable folder with os.access only, which root
    # passes; a name too long, a pipe, a link loop failed after the work, or with a traceback
    cases = _bad_outputs(tmp_path, refusing_folder)
    _no_work(monkeypatch)
    before = _listing(tmp_path)
    for case, out, message in cases:
        rc, _, err = run_cli(capsys, *[a.format(out=out, **inputs) for a in command])
        assert rc == 2, (case, err)
        line = error_line(err)
        assert message in line, (case, line)
        assert "Traceback" not in err
        assert _listing(tmp_path) == before, case


def test_the_default_output_is_checked_before_any_work(capsys, tmp_path, monkeypatch, refusing_folder):
    # IN.opt.onnx and --in-place were not checked at all: a PermissionError traceback after
    # the whole optimization
    _no_work(monkeypatch)
    src = refusing_folder / "m.onnx"
    for args in ([], ["--in-place"]):
        rc, _, err = run_cli(capsys, "optimize", src, *args)
        assert rc == 2, err
        assert error_line(err).startswith(f"eqsat: error: {src.with_name('m.opt.onnx') if not args else src}: "
                                          f"the output folder {refusing_folder} is not writable")
    long = tmp_path / ("m" * 248 + ".onnx")  # 253 bytes: fits, but m...m.opt.onnx does not
    onnx.save(build_model(), str(long))
    rc, _, err = run_cli(capsys, "optimize", long)
    default = tmp_path / ("m" * 248 + ".opt.onnx")
    assert rc == 2 and error_line(err) == (f"eqsat: error: {default}: the file name is too long (257 bytes; "
                                           f"{tmp_path} allows 255)")


def test_a_folder_that_refuses_files_is_found_by_trying(capsys, tmp_path, monkeypatch, refusing_folder):
    # os.access says yes to root for a folder that is read-only by its mode: the output
    # check must not rest on it
    _no_work(monkeypatch)
    monkeypatch.setattr(os, "access", lambda *a, **k: True)
    src = refusing_folder / "m.onnx"
    for args in (["-o", refusing_folder / "o.onnx"], ["--report", refusing_folder / "r.json"], ["--in-place"]):
        rc, _, err = run_cli(capsys, "optimize", src, *args)
        assert rc == 2, err
        assert f": the output folder {refusing_folder} is not writable (" in error_line(err)
    monkeypatch.undo()
    assert sorted(p.name for p in refusing_folder.iterdir()) == ["m.onnx"]


def test_the_models_data_file_name_must_fit_too(capsys, tmp_path, monkeypatch):
    # OUT.onnx.data is written beside a model whose weights stay on disk
    _no_work(monkeypatch)
    src = tmp_path / "m.onnx"
    onnx.save(build_model(), str(src))
    out = tmp_path / ("o" * 246 + ".onnx")  # 251 bytes; with .data 256
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out)
    assert rc == 2 and error_line(err) == (f"eqsat: error: {out}: the file name is too long for the model's data file "
                                           f"beside it, {out.name}.data (256 bytes; {tmp_path} allows 255)")
    assert _listing(tmp_path) == ["m.onnx"]


def test_names_that_fit_are_written_whatever_their_length(capsys, tmp_path):
    # the temporary files took the target's name and 10 characters more: a 250-byte name
    # passed every check, then failed (ENAMETOOLONG) after the work
    src = tmp_path / "m.onnx"
    onnx.save(build_model(), str(src))
    out, report = tmp_path / ("o" * 245 + ".onnx"), tmp_path / ("r" * 250 + ".json")
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--report", report, "-q")
    assert rc == 0, err
    assert _listing(tmp_path) == sorted(["m.onnx", out.name, report.name])


def test_a_folder_where_the_models_data_file_goes_is_refused(capsys, tmp_path, monkeypatch):
    # the rename of the data file failed after the work (IsADirectoryError)
    _no_work(monkeypatch)
    src = tmp_path / "m.onnx"
    onnx.save(build_model(), str(src))
    (tmp_path / "o.onnx.data").mkdir()
    rc, _, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "o.onnx")
    assert rc == 2 and error_line(err) == (f"eqsat: error: {tmp_path / 'o.onnx'}: the model's data file beside it, "
                                           f"{tmp_path / 'o.onnx.data'}, is a folder; move it or name another output")
