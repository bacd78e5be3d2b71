"""Every output of a command is committed, or none: `eqsat optimize` writes the model, its
data file, --plan and --report under temporary names beside their targets and renames them
into place only once all are written; a failure at any point (staging a file, renaming one)
leaves every previous output as it was and no temporary file or folder behind."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from eqsat.io import atomic

from .test_cli import error_line, run_cli

W = np.arange(128 * 256, dtype=np.float32).reshape(128, 256) / 1000  # 128 KiB: the output has a data file


def _model(folder: Path) -> Path:
    """y = Relu(x) @ w, w in w.bin (large: it stays on disk, and the output gets OUT.onnx.data)."""
    w = onnx.numpy_helper.from_array(W, "w")
    g = h.make_graph([h.make_node("Relu", ["x"], ["r"]), h.make_node("MatMul", ["r", "w"], ["y"])], "g",
                     [h.make_tensor_value_info("x", TP.FLOAT, [2, 128])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [2, 256])], [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    path = folder / "m.onnx"
    onnx.save(m, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    return path


OLD = {"o.onnx": b"old model", "o.onnx.data": b"old weights", "r.json": b"old report", "p.json": b"old plan"}


@pytest.fixture
def outputs(tmp_path) -> Path:
    for name, data in OLD.items():
        (tmp_path / name).write_bytes(data)
    return tmp_path


def _args(folder: Path, src: Path) -> list:
    return ["optimize", src, "-o", folder / "o.onnx", "--report", folder / "r.json", "--plan", folder / "p.json",
            "-q"]


def _assert_untouched(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir()) == sorted([*OLD, "m.onnx", "w.bin"])  # no temporary
    assert {n: (folder / n).read_bytes() for n in OLD} == OLD


@pytest.mark.parametrize("target", list(OLD))
def test_a_failed_rename_of_any_output_replaces_none(capsys, outputs, monkeypatch, target):
    # --report and --plan were written after the model was renamed into place: their failure
    # exited 1 with the old model already replaced; a failed rename of the model left the
    # new data file beside the old model
    src = _model(outputs)
    real = os.replace

    def replace(a, b):
        if Path(b) == outputs / target and not Path(a).name.startswith(f".{target}.old"):
            raise OSError(errno.ENOSPC, "No space left on device", str(b))
        real(a, b)

    monkeypatch.setattr(atomic.os, "replace", replace)
    rc, _, err = run_cli(capsys, *_args(outputs, src))
    monkeypatch.undo()
    assert rc == 1, err
    assert error_line(err) == (f"eqsat: error: {outputs / target}: cannot write it: No space left on device; "
                               "no output was replaced")
    _assert_untouched(outputs)


@pytest.mark.parametrize("target", ["r.json", "p.json"])
def test_a_failed_write_of_a_side_file_replaces_none(capsys, outputs, monkeypatch, target):
    src = _model(outputs)
    real = atomic.tempfile.mkstemp

    def mkstemp(*a, prefix="", **k):
        if prefix.startswith(f".{target}."):
            raise OSError(errno.EROFS, "Read-only file system")
        return real(*a, prefix=prefix, **k)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", mkstemp)
    rc, _, err = run_cli(capsys, *_args(outputs, src))
    monkeypatch.undo()
    assert rc == 1, err
    assert error_line(err) == f"eqsat: error: {outputs / target}: cannot write it: Read-only file system"
    _assert_untouched(outputs)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, "terminated"])
def test_an_interrupt_while_the_outputs_are_renamed_replaces_none(capsys, outputs, monkeypatch, interrupt):
    from eqsat.errors import Terminated

    src = _model(outputs)
    real = os.replace

    def replace(a, b):
        if Path(b) == outputs / "r.json" and not Path(a).name.startswith(".r.json.old"):
            raise Terminated() if interrupt == "terminated" else KeyboardInterrupt()
        real(a, b)

    monkeypatch.setattr(atomic.os, "replace", replace)
    rc, _, err = run_cli(capsys, *_args(outputs, src))
    monkeypatch.undo()
    assert rc == (143 if interrupt == "terminated" else 130), err
    _assert_untouched(outputs)


def test_an_interrupt_during_verification_leaves_nothing(capsys, outputs, monkeypatch):
    import eqsat.verification

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(eqsat.verification, "verify", interrupted)
    rc, _, err = run_cli(capsys, *_args(outputs, _model(outputs)))
    assert rc == 130, err
    _assert_untouched(outputs)


def test_a_failed_plan_leaves_nothing(capsys, outputs, monkeypatch):
    from eqsat.plan import entry as plan_entry
    from eqsat.plan.errors import PlanError

    def failed(*a, **k):
        raise PlanError("simulated: two live tensors overlap")

    monkeypatch.setattr(plan_entry, "checked_plan", failed)
    rc, _, err = run_cli(capsys, *_args(outputs, _model(outputs)))
    assert rc == 1 and error_line(err) == "eqsat: error: simulated: two live tensors overlap"
    _assert_untouched(outputs)


def test_all_outputs_are_written_together(capsys, outputs):
    src = _model(outputs)
    rc, _, err = run_cli(capsys, *_args(outputs, src))
    assert rc == 0, err
    assert sorted(p.name for p in outputs.iterdir()) == sorted([*OLD, "m.onnx", "w.bin"])
    report, plan = json.loads((outputs / "r.json").read_text()), json.loads((outputs / "p.json").read_text())
    assert report["verification"]["status"] == "passed" and report["plan"]["file"] == str(outputs / "p.json")
    assert plan["arena_bytes"] == report["plan"]["arena_bytes"]
    x = np.random.default_rng(0).standard_normal((2, 128)).astype(np.float32)
    got = ort.InferenceSession(str(outputs / "o.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.maximum(x, 0) @ W, rtol=1e-4)
    assert (outputs / "o.onnx.data").stat().st_size >= W.nbytes


def test_a_commit_that_fails_midway_restores_what_it_replaced(tmp_path, monkeypatch):
    # the unit: three files, the third's rename fails; the first two are restored, the file
    # that did not exist before is gone again, and no backup or temporary is left
    (tmp_path / "a").write_text("old a")
    (tmp_path / "b").write_text("old b")
    real = os.replace

    def replace(a, b):
        if Path(b).name == "c":
            raise OSError(errno.EIO, "Input/output error")
        real(a, b)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(atomic.EqsatError, match=f"^{tmp_path / 'c'}: cannot write it: Input/output error; "
                                                "no output was replaced$"), atomic.Commit() as c:
        for name in ("a", "new", "b", "c"):
            c.text(tmp_path / name, f"new {name}")
        c.commit()
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a": "old a", "b": "old b"}
    monkeypatch.undo()
    with atomic.Commit() as c:
        for name in ("a", "c"):
            c.text(tmp_path / name, f"new {name}")
        c.commit()
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a": "new a", "b": "old b", "c": "new c"}


def test_a_commit_without_hard_links_still_restores(tmp_path, monkeypatch):
    # a file system without hard links: the replaced file is moved aside, then back
    (tmp_path / "a").write_text("old a")
    real = os.replace

    def no_link(*a, **k):
        raise OSError(errno.EPERM, "Operation not permitted")

    def replace(a, b):
        if Path(b).name == "c":
            raise OSError(errno.EIO, "Input/output error")
        real(a, b)

    monkeypatch.setattr(atomic.os, "link", no_link)
    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(atomic.EqsatError), atomic.Commit() as c:
        c.text(tmp_path / "a", "new a")
        c.text(tmp_path / "c", "new c")
        c.commit()
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a": "old a"}


def test_the_data_file_is_written_beside_the_model_not_through_a_link(capsys, tmp_path):
    # written through a link to another folder, the weights were where onnxruntime (and
    # eqsat) refuse to read them: "o.onnx.data" escaped the model's folder
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.bin").write_bytes(b"keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "o.onnx.data").symlink_to(tmp_path / "elsewhere" / "x.bin")
    src = _model(tmp_path)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out / "o.onnx", "-q")
    assert rc == 0, err
    assert not (out / "o.onnx.data").is_symlink() and (tmp_path / "elsewhere" / "x.bin").read_bytes() == b"keep"
    x = np.random.default_rng(0).standard_normal((2, 128)).astype(np.float32)
    got = ort.InferenceSession(str(out / "o.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, np.maximum(x, 0) @ W, rtol=1e-4)
