"""Environment settings are checked as command-line flags are: a bad value is one line
naming the variable, what it holds and what it accepts (exit 2), whichever command reads
it; a corrupt measurement cache is ignored with a warning and rebuilt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from .conftest import one_error, parse_model, run_cli

MODEL = """<ir_version: 8, opset_import: ["": 17]>
g (float[2, 8] x) => (float[2, 8] y) {
  a = Relu(x)
  y = Sigmoid(a)
}"""


@pytest.fixture
def src(tmp_path, monkeypatch) -> Path:
    from eqsat.backends.ort.target import nchwc_block

    for var in ("EQSAT_NCHWC", "EQSAT_NCHWC_BLOCK", "EQSAT_CACHE", "EQSAT_REUSE_MEMORY", "EQSAT_ILP_DISP",
                "EQSAT_U8S8_EXACT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EQSAT_CACHE", str(tmp_path / "cache"))  # never the user's own
    nchwc_block.cache_clear()
    p = tmp_path / "m.onnx"
    onnx.save(parse_model(MODEL), str(p))
    yield p
    nchwc_block.cache_clear()


BAD = [
    ("EQSAT_NCHWC_BLOCK", "abc", "0 (no blocked layout) or a power of two >= 2"),
    ("EQSAT_NCHWC_BLOCK", "12", "0 (no blocked layout) or a power of two >= 2"),
    ("EQSAT_NCHWC_BLOCK", "-8", "0 (no blocked layout) or a power of two >= 2"),
    ("EQSAT_NCHWC", "no", "0 or 1"),
    ("EQSAT_ILP_DISP", "yes", "0 or 1"),
    ("EQSAT_REUSE_MEMORY", "maybe", "0 or 1"),
    ("EQSAT_U8S8_EXACT", "yes", "0 (onnxruntime's uint8 x int8 kernels saturate"),
]


@pytest.mark.parametrize("var, value, accepted", BAD)
@pytest.mark.parametrize("command", ["optimize", "plan", "extract"])
def test_a_bad_setting_is_one_line_naming_it(capsys, tmp_path, monkeypatch, src, var, value, accepted, command):
    args = {"optimize": ["optimize", src, "-o", tmp_path / "o.onnx", "-q"], "plan": ["plan", src, "-q"],
            "extract": ["extract", tmp_path / "g.json"]}[command]
    if command == "extract":
        assert run_cli(capsys, "optimize", src, "-o", tmp_path / "x.onnx", "--save-egraph", tmp_path / "g.json",
                       "-q")[0] == 0
    monkeypatch.setenv(var, value)
    rc, _, err = run_cli(capsys, *args)
    line = one_error(err)
    assert rc == 2, err
    assert line.startswith(f"eqsat: error: {var} is {value!r}; expected {accepted}"), line
    assert not (tmp_path / "o.onnx").exists()


def test_the_accepted_values_work(capsys, tmp_path, monkeypatch, src):
    for var, value in [("EQSAT_NCHWC", "0"), ("EQSAT_NCHWC", " 1 "), ("EQSAT_NCHWC_BLOCK", "0"),
                       ("EQSAT_NCHWC_BLOCK", "8"), ("EQSAT_REUSE_MEMORY", "0"), ("EQSAT_ILP_DISP", ""),
                       ("EQSAT_U8S8_EXACT", "0"), ("EQSAT_U8S8_EXACT", "1"),
                       ("EQSAT_CACHE", "")]:
        monkeypatch.setenv(var, value)
        rc, _, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "o.onnx", "-q")
        assert rc == 0, (var, value, err)
        monkeypatch.delenv(var)


def test_ilp_disp_0_prints_no_solver_log(capsys, tmp_path, monkeypatch, src):
    # it was bool(os.environ.get(...)): "0" turned HiGHS's log on
    monkeypatch.setenv("EQSAT_ILP_DISP", "0")
    rc, out, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "o.onnx", "-q")
    assert rc == 0 and out == "" and err == "", out + err
    from eqsat.extract.ilp import solver_log

    monkeypatch.setenv("EQSAT_ILP_DISP", "1")
    assert solver_log() is True
    monkeypatch.setenv("EQSAT_ILP_DISP", "on")
    with pytest.raises(ValueError, match="EQSAT_ILP_DISP is 'on'; expected 0 or 1"):
        solver_log()  # the extract package's own check, for library users


def test_the_program_reports_a_bad_reuse_setting_without_a_traceback(tmp_path, src):
    # read before main() by the allocator: it must not crash there, and the command says why
    env = {**os.environ, "EQSAT_REUSE_MEMORY": "yes"}
    p = subprocess.run([sys.executable, "-m", "eqsat", "plan", str(src), "-q"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 2, p.stderr
    assert one_error(p.stderr).startswith("eqsat: error: EQSAT_REUSE_MEMORY is 'yes'; expected 0 or 1")
    import eqsat.io.allocator

    assert eqsat.io.allocator.user_tuned({"EQSAT_REUSE_MEMORY": "yes"})  # glibc's defaults, not ours


def test_a_cache_setting_that_is_not_a_folder_is_refused(capsys, tmp_path, monkeypatch, src):
    f = tmp_path / "afile"
    f.write_text("x")
    monkeypatch.setenv("EQSAT_CACHE", str(f))
    rc, _, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "o.onnx", "-q", "--cost-model", "measured")
    assert rc == 2 and one_error(err).startswith(f"eqsat: error: EQSAT_CACHE is {str(f)!r}; expected a folder"), err


@pytest.mark.parametrize("content", [b"[1, 2]", b"{not json", b"\xff\xfe\x00", b'{"abc": "x"}', b'{"abc": -1}',
                                     b"null"])
def test_a_corrupt_cache_is_ignored_with_a_warning_and_rebuilt(capsys, tmp_path, monkeypatch, src, content):
    folder = tmp_path / "c"
    folder.mkdir()
    cache = folder / "measured.json"
    cache.write_bytes(content)
    monkeypatch.setenv("EQSAT_CACHE", str(folder))
    for command in (["optimize", src, "-o", tmp_path / "o.onnx", "-q", "--cost-model", "measured"],
                    ["compare-costs", src, "-q", "--samples", "1", "--runs", "1", "--cost-model", "measured"]):
        rc, _, err = run_cli(capsys, *command)
        assert rc == 0 and "Traceback" not in err, err
        warnings = [ln for ln in err.splitlines() if ln.startswith("eqsat: warning:")]
        assert len(warnings) == 1 and str(cache) in warnings[0] and "rebuilt" in warnings[0], err
        data = json.loads(cache.read_text())  # rebuilt: this run's measurements
        assert isinstance(data, dict) and data and all(v is None or v > 0 for v in data.values())
        rc, _, err = run_cli(capsys, *command)  # and read back without a warning
        assert rc == 0 and "warning" not in err, err
        cache.write_bytes(content)


def test_a_cache_that_is_a_folder_is_not_used(capsys, tmp_path, monkeypatch, src):
    folder = tmp_path / "c"
    (folder / "measured.json").mkdir(parents=True)
    monkeypatch.setenv("EQSAT_CACHE", str(folder))
    rc, _, err = run_cli(capsys, "optimize", src, "-o", tmp_path / "o.onnx", "-q", "--cost-model", "measured")
    assert rc == 0, err
    warnings = [ln for ln in err.splitlines() if ln.startswith("eqsat: warning:")]
    assert len(warnings) == 1 and "not a file" in warnings[0], err
