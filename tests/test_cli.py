"""The command line: exit codes, one-line errors, outputs, reports, limits."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from eqsat.cli.main import main
from eqsat.demo import build_model

from .conftest import assert_same_outputs, one_error, run_cli


@pytest.fixture
def model_path(tmp_path) -> Path:
    p = tmp_path / "model.onnx"
    onnx.save(build_model(), str(p))
    return p


error_line = one_error  # the name the CLI tests use


def test_optimize_writes_output_and_report(capsys, model_path, tmp_path):
    out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", out, "--report", rep)
    assert rc == 0, err
    r = json.loads(rep.read_text())
    assert r["nodes_before"] == 15 and r["nodes_after"] < 15
    assert r["saturation"]["stop_reason"] == "saturated"
    assert set(r["times_s"]) >= {"encode", "saturate", "serialize", "extract", "decode"}
    # what chose the program: the profile behind the rules' guards and the costs, the layout
    from eqsat.backends.ort.target import hardware_profile, nchwc_block

    # the layout in effect: nchwc where onnxruntime has the blocked kernels, else nchw
    assert (r["target"], r["hardware"], r["layout"]) == ("ort", hardware_profile("cpu"),
                                                         "nchwc" if nchwc_block() else "nchw")
    assert r["extraction"]["cost_model"] == "roofline" and r["extraction"]["extractor"] == "ilp"
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", out, "--report", rep, "--hardware", "h200",
                         "--layout", "nchw", "--cost-model", "roofline", "-q")
    assert rc == 0, err
    r = json.loads(rep.read_text())
    assert (r["hardware"], r["layout"], r["extraction"]["cost_model"]) == ("h200", "nchw", "roofline")
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", out, "--report", rep, "--target", "onnx", "-q")
    assert rc == 0 and json.loads(rep.read_text())["layout"] == "nchw"  # no blocked ops in standard ONNX
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", out, "--report", rep)
    assert rc == 0, err
    # progress on stderr, one line per phase, in order
    phases = ["loaded", "inferred shapes", "encoded", "round 1", "saturation stopped", "extracted with",
              "saved and checked", "verification passed", "wrote"]
    at = [next((i for i, line in enumerate(err.splitlines()) if f"] {p}" in line), -1) for p in phases]
    assert -1 not in at and at == sorted(at), dict(zip(phases, at, strict=True))
    assert_same_outputs(onnx.load(str(model_path)), onnx.load(str(out)), dims={"batch": 3}, rtol=1e-5, atol=1e-6)


def test_default_output_name_and_quiet(capsys, model_path):
    rc, out, err = run_cli(capsys, "optimize", model_path, "-q")
    assert rc == 0 and out == "" and err == ""
    assert (model_path.parent / "model.opt.onnx").is_file()


def test_no_command_is_a_usage_error_saying_so(capsys):
    rc, out, err = run_cli(capsys)
    assert rc == 2 and out == "" and err.startswith("usage: eqsat")
    assert error_line(err) == "eqsat: error: a command is required (optimize, plan, show, ...)"


def test_an_interrupt_after_the_outcome_changes_nothing():
    # Ctrl-C while the interpreter shut down, after the output was written: a traceback from
    # the threads' shutdown with exit 0, or the signal's status instead of the outcome's
    code = ("import atexit, os, signal, eqsat.cli.main as c\n"
            "c.main = lambda: 0\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), os.kill(os.getpid(), signal.SIGTERM)))\n"
            "c.run()\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stderr) == (0, "")


def test_python_dash_m(model_path, tmp_path):
    out = tmp_path / "o.onnx"
    p = subprocess.run([sys.executable, "-m", "eqsat", "optimize", str(model_path), "-o", str(out), "-q"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert out.is_file()


@pytest.mark.parametrize("args", [["--help"], ["optimize", "--help"], ["plan", "--help"], ["--version"]])
def test_help_imports_no_heavy_package(args):
    # Help and usage must come at once: egglog, onnx, onnxruntime and numpy are imported by
    # the commands that use them, not by the parser (together about 0.7 s here).
    code = ("import sys\nfrom eqsat.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'egglog', 'onnx', 'onnxruntime', 'numpy'})\n"
            "print('HEAVY', heavy)")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[-1] == "HEAVY []"


def test_plan_package_names_load_on_first_use():
    import eqsat.plan as plan

    assert set(plan.__all__) == set(plan._EXPORTS) and set(plan.__all__) <= set(dir(plan))
    assert all(callable(getattr(plan, name)) for name in plan.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        plan.nope  # noqa: B018


_REFAULTS = """
import resource, sys
from eqsat.io.allocator import mapped, reuse_freed_memory
took = reuse_freed_memory() if sys.argv[1] != "off" else None
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
if sys.argv[1] == "mapped":
    with mapped():
        b = bytearray(200 << 20)
else:
    b = bytearray(200 << 20)
del b
f0 = faults(); b = bytearray(200 << 20)
print(took, faults() - f0)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's (mallopt)")
def test_the_program_reuses_freed_memory():
    # A freed 200 MiB buffer is served again without faulting its pages back in (51,200 of
    # 4 KiB); glibc's default unmaps it and the next one faults every page. Compared with
    # the default's own count, which page size and huge pages set.
    def refaults(mode, **env):
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "EQSAT_REUSE_MEMORY")}
        p = subprocess.run([sys.executable, "-c", _REFAULTS, mode], capture_output=True, text=True, timeout=120,
                           env={**clean, **env})
        assert p.returncode == 0, p.stderr
        took, faults = p.stdout.split()
        return took, int(faults)

    default = refaults("off")[1]
    if default < 50:
        pytest.skip(f"glibc's default faulted the buffer in {default} times: no difference to measure")
    took, faults = refaults("on")
    assert took == "True" and faults < default / 10
    # Under mapped() a buffer goes back to the system when freed, as by default.
    took, faults = refaults("mapped")
    assert took == "True" and faults > default / 2
    # The opt-out and the user's own setting of what eqsat overrides win; an unrelated
    # setting (the arena count, common in containers) does not.
    for env in ({"EQSAT_REUSE_MEMORY": "0"}, {"MALLOC_TRIM_THRESHOLD_": "131072"},
                {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=65536"}):
        took, faults = refaults("on", **env)
        assert took == "False" and faults > default / 2, env
    took, faults = refaults("on", MALLOC_ARENA_MAX="2")
    assert took == "True" and faults < default / 10


def test_only_the_program_sets_the_allocator(capsys, monkeypatch):
    import eqsat.io.allocator
    from eqsat.cli import main as cli

    assert eqsat.io.allocator.user_tuned({"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0"})
    assert eqsat.io.allocator.user_tuned({"EQSAT_REUSE_MEMORY": "0"})
    assert not eqsat.io.allocator.user_tuned({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "MALLOC_ARENA_MAX": "2"})

    calls = []
    monkeypatch.setattr(eqsat.io.allocator, "reuse_freed_memory", lambda: calls.append(1) or True)
    assert run_cli(capsys)[0] == 2  # main(): a library user's process is left alone
    assert calls == []
    monkeypatch.setattr(sys, "argv", ["eqsat"])
    with pytest.raises(SystemExit) as e:
        cli.run()
    assert e.value.code == 2 and calls == [1]


def test_refuses_to_overwrite_the_input(capsys, model_path):
    before = model_path.read_bytes()
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", model_path)
    assert rc == 2
    assert error_line(err) == (f"eqsat: error: {model_path}: --output would overwrite the input {model_path}; "
                               "pass --in-place to allow it")
    assert model_path.read_bytes() == before
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", model_path, "--in-place", "-q")
    assert rc == 0, err


def test_missing_file(capsys, tmp_path):
    rc, _, err = run_cli(capsys, "optimize", tmp_path / "nope.onnx")
    assert rc == 2
    assert error_line(err) == f"eqsat: error: {tmp_path / 'nope.onnx'}: no such file"


def test_not_an_onnx_file(capsys, tmp_path):
    p = tmp_path / "x.onnx"
    p.write_text("this is not a model\n" * 10)
    rc, _, err = run_cli(capsys, "optimize", p)
    assert rc == 2
    assert error_line(err).startswith(f"eqsat: error: {p}: not an ONNX model")


def test_truncated_file(capsys, model_path, tmp_path):
    p = tmp_path / "t.onnx"
    p.write_bytes(model_path.read_bytes()[:1000])
    rc, _, err = run_cli(capsys, "optimize", p, "-o", tmp_path / "o.onnx")
    assert rc == 2
    assert "not an ONNX model" in error_line(err) and "truncated" in error_line(err)
    assert not (tmp_path / "o.onnx").exists()


def test_model_the_checker_rejects(capsys, tmp_path):
    m = build_model()
    m.graph.node[0].input[0] = "undefined_value"
    p = tmp_path / "bad.onnx"
    onnx.save(m, str(p))
    rc, _, err = run_cli(capsys, "optimize", p)
    assert rc == 2
    assert error_line(err).startswith(f"eqsat: error: {p}: the onnx checker rejects the model: ")


def test_rule_file_error_is_file_line_col(capsys, model_path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.egg").write_text("(ruleset mine)\n(rewrite (Relu x) (Relu y) :ruleset mine)\n")
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", "o.onnx", "--rules", "mine.egg")
    assert rc == 2
    assert error_line(err) == "eqsat: error: mine.egg:2:25: unbound variable y; the rule binds x"
    assert not (tmp_path / "o.onnx").exists()


def test_bad_usage(capsys):
    rc, _, err = run_cli(capsys, "optimize")
    assert rc == 2 and "the following arguments are required" in error_line(err)
    rc, _, err = run_cli(capsys, "optimize", "m.onnx", "--node-limit", "0")
    assert rc == 2 and "must be > 0" in error_line(err)
    rc, _, err = run_cli(capsys)
    assert rc == 2 and "usage" in err
    rc, _, err = run_cli(capsys, "optimize", "m.onnx", "--extractor", "magic")
    assert rc == 2
    for flag, bad in (("--rtol", "-1"), ("--atol", "nan")):
        rc, _, err = run_cli(capsys, "optimize", "m.onnx", flag, bad)
        assert rc == 2 and "must be >= 0" in error_line(err), bad
    for bad in ("batch", "batch=", "=8", "batch=0", "batch=x"):  # --dim wants NAME=VALUE, VALUE > 0
        rc, _, err = run_cli(capsys, "optimize", "m.onnx", "--dim", bad)
        assert rc == 2 and "expected NAME=VALUE" in error_line(err), bad


def test_argtypes_parse_what_they_accept():
    from eqsat.cli.args import dim, positive_float, positive_int, power_of_two

    assert dim("batch=8") == ("batch", 8) and dim("seq_len=128") == ("seq_len", 128)
    assert positive_int("3") == 3 and positive_float("0.5") == 0.5
    assert power_of_two("64") == 64 and power_of_two("1") == 1
    for f, bad in ((positive_int, "0"), (positive_int, "1.5"), (positive_float, "-1"), (positive_float, "nan"),
                   (power_of_two, "3"), (power_of_two, "0")):
        with pytest.raises(argparse.ArgumentTypeError):
            f(bad)


@pytest.mark.parametrize("text", [
    "(ruleset mine)\n(rewrite (Relu (Relu x)) (Relu x) :ruleset mine :name \"my-relu-relu\")\n",
    # without :ruleset: egglog's default ruleset, which runs too (it was loaded, listed and
    # checked, but never run)
    "(rewrite (Relu (Relu x)) (Relu x) :name \"my-relu-relu\")\n",
    "(rule ((= e (Relu (Relu x)))) ((union e (Relu x))) :name \"my-relu-relu\")\n",
    # in a phase the prelude declares: with --no-default-rules there is no schedule to run
    # it, and it was loaded, matched nothing and said nothing
    "(rewrite (Relu (Relu x)) (Relu x) :ruleset cleanup :name \"my-relu-relu\")\n",
])
def test_user_rules_run_with_and_without_default_rules(capsys, model_path, tmp_path, text):
    rules = tmp_path / "neg.egg"
    # a rule of the user's own: Relu(Relu(x)) -> Relu(x)
    rules.write_text(text)
    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[4] x) => (float[4] y) { a = Relu(x)  i = Identity(a)  y = Relu(i) }
    """)
    src = tmp_path / "m.onnx"
    onnx.save(m, str(src))
    for extra, expected in (([], ["Relu"]), (["--no-default-rules"], ["Relu", "Identity", "Relu"])):
        out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
        rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules, "--report", rep, *extra)
        assert rc == 0, err
        assert [n.op_type for n in onnx.load(str(out)).graph.node] == expected
        assert_same_outputs(m, onnx.load(str(out)))
    # the user's rule alone: Relu(Relu(x)) -> Relu(x)
    onnx.save(onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[4] x) => (float[4] y) { a = Relu(x)  y = Relu(a) }
    """), str(src))
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules, "--report", rep, "--no-default-rules")
    assert rc == 0, err
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["Relu"]
    assert json.loads(rep.read_text())["saturation"]["rule_matches"]["my-relu-relu"] >= 1


COMMUTE = """
(ruleset ac)
; Add(a, b) -> Add(b, a) and Add(Add(a, b), c) -> Add(a, Add(b, c)): blows up on purpose
(rewrite (Add a b) (Add b a) :ruleset ac :name "add-comm")
(rewrite (Add (Add a b) c) (Add a (Add b c)) :ruleset ac :name "add-assoc")
"""


def _sum_chain(n: int) -> onnx.ModelProto:
    body = "\n".join(f"s{i + 1} = Add(s{i}, x{i})" for i in range(n))
    inputs = ", ".join(f"float[2] x{i}" for i in range(n))
    text = f"""<ir_version: 8, opset_import: ["" : 18]>
        agraph (float[2] s0, {inputs}) => (float[2] s{n}) {{ {body} }}"""
    return onnx.parser.parse_model(text)


def _saturate_chain(capsys, tmp_path, n: int, *limit_args) -> tuple[onnx.ModelProto, Path, dict]:
    """Optimize an n-term sum under the blow-up rules; returns (model, output, saturation report).
    Commutativity makes an e-graph full of symmetric cycles, where the ILP would spend its
    whole time limit proving what DAG greedy finds at once: these tests use DAG greedy."""
    m = _sum_chain(n)
    src, out, rep, rules = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json", tmp_path / "ac.egg"
    onnx.save(m, str(src))
    rules.write_text(COMMUTE)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules, "--report", rep, "-q",
                         "--extractor", "dag-greedy", *limit_args)
    assert rc == 0, err
    return m, out, json.loads(rep.read_text())["saturation"]


def test_node_limit_stops_a_blowup_and_rolls_back(capsys, tmp_path):
    m, out, sat = _saturate_chain(capsys, tmp_path, 10, "--node-limit", "3000")
    assert sat["stop_reason"] == "node-limit"
    assert "rolled back" in sat["stop_detail"]
    assert sat["enodes"] <= 3000 and sat["iterations"] >= 1
    feeds = {f"x{i}": np.full(2, i, np.float32) for i in range(10)} | {"s0": np.ones(2, np.float32)}
    assert_same_outputs(m, onnx.load(str(out)), feeds)


def test_iteration_limit(capsys, tmp_path):
    _, _, sat = _saturate_chain(capsys, tmp_path, 6, "--iter-limit", "2")
    assert sat["stop_reason"] == "iteration-limit" and sat["iterations"] == 2


def test_time_limit(capsys, tmp_path):
    _, _, sat = _saturate_chain(capsys, tmp_path, 8, "--time-limit", "0.000001")
    assert sat["stop_reason"] == "time-limit" and sat["iterations"] == 0  # checked before each round


def test_verification_catches_a_wrong_rule_and_writes_nothing(capsys, tmp_path):
    m = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        agraph (float[4] x) => (float[4] y) { y = Relu(x) }""")
    src, out, rules = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "wrong.egg"
    onnx.save(m, str(src))
    rules.write_text('(ruleset wrong)\n(rewrite (Relu x) x :ruleset wrong :name "relu-is-identity")\n')
    unnamed = tmp_path / "unnamed.egg"  # the same rule without :ruleset: it runs, and fails, too
    unnamed.write_text('(rewrite (Relu x) x :name "relu-is-identity")\n')
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", unnamed, "-q")
    assert rc == 1 and "verification failed" in error_line(err)
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules)
    assert rc == 1
    line = error_line(err)
    assert line.startswith("eqsat: error: verification failed, nothing written: output 'y': ")
    assert "values differ" in line and "max abs diff" in line
    assert "np.float32" not in line  # numbers as a user reads them
    assert not out.exists()
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules, "--no-verify", "-q")
    assert rc == 0 and out.exists()  # the user asked for it


def test_a_model_verification_cannot_check_is_not_written_unless_asked(capsys, tmp_path):
    # an op of a domain onnxruntime knows but without a kernel: it cannot run the original
    # (an op of a domain it does not know gets a stand-in: tests/test_verify.py). A rule file's
    # Relu -> x, wrong for every negative input, was written with exit 0 and a warning here:
    # a model nothing checked is refused by default, and written only when the user asks
    node = onnx.helper.make_node("Mystery", ["x"], ["t"], domain="com.microsoft")
    g = onnx.helper.make_graph([node, onnx.helper.make_node("Relu", ["t"], ["y"])], "g",
                               [onnx.helper.make_tensor_value_info("x", 1, [2])],
                               [onnx.helper.make_tensor_value_info("y", 1, [2])])
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 18),
                                                 onnx.helper.make_opsetid("com.microsoft", 1)])
    src, out, rep, rules = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json", tmp_path / "wrong.egg"
    onnx.save(m, str(src))
    rules.write_text('(ruleset wrong)\n(rewrite (Relu x) x :ruleset wrong :name "relu-is-identity")\n')
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules, "--report", rep)
    assert rc == 1 and not out.exists() and not rep.exists(), err
    line = error_line(err)
    assert line.startswith("eqsat: error: verification not possible, nothing written: onnxruntime cannot run "
                           "the original"), line
    assert line.endswith(" (write it unverified with --allow-unverified)"), line
    # the user who takes the risk says so, and is warned
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--report", rep, "--allow-unverified")
    assert rc == 0 and out.exists()
    assert "eqsat: warning: verification not possible: onnxruntime cannot run the original" in err
    assert err.count("verification not possible") == 1  # the warning, not also a progress line
    assert json.loads(rep.read_text())["verification"]["status"] == "not possible"
    # --require-verification, the default now, is still accepted
    strict = tmp_path / "strict.onnx"
    rc, _, err = run_cli(capsys, "optimize", src, "-o", strict, "--require-verification")
    assert rc == 1 and not strict.exists()
    assert error_line(err).startswith("eqsat: error: verification not possible, nothing written: ")
    for pair in (("--require-verification", "--no-verify"), ("--require-verification", "--allow-unverified")):
        rc, _, err = run_cli(capsys, "optimize", src, "-o", strict, *pair)
        assert rc == 2 and "contradict each other" in err


def test_the_python_api_refuses_a_model_it_cannot_verify_unless_asked():
    node = onnx.helper.make_node("Mystery", ["x"], ["y"], domain="com.microsoft")
    g = onnx.helper.make_graph([node], "g", [onnx.helper.make_tensor_value_info("x", 1, [2])],
                               [onnx.helper.make_tensor_value_info("y", 1, [2])])
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 18),
                                                 onnx.helper.make_opsetid("com.microsoft", 1)])
    import eqsat

    with pytest.raises(eqsat.OptimizeError, match=r"^verification not possible: onnxruntime cannot run the original"
                                                  r".*require_verification=False\)$"):
        eqsat.optimize(m)
    r = eqsat.optimize(m, require_verification=False)
    assert r.report.verification["status"] == "not possible"
    assert any(w.startswith("verification not possible: ") for w in r.report.warnings)


# a ViT's patch embedding: 4 x 4 patches of [batch, 1, h, w] and position embeddings for 2 x 2
# of them fix h = w = 8, which no size of verification_dims is
VIT_PATCHES = """
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[batch, 1, h, w] x) => (float[batch, 4, 2] y)
      <float[2, 1, 4, 4] wt = {0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, -0.8, 0.9, -1.0, 1.1, -1.2, 1.3, -1.4, 1.5,
                               -1.6, 1.6, -1.5, 1.4, -1.3, 1.2, -1.1, 1.0, -0.9, 0.8, -0.7, 0.6, -0.5, 0.4, -0.3,
                               0.2, -0.1},
       float[1, 4, 2] pos = {0.5, -0.5, 0.25, -0.25, 1.0, -1.0, 0.75, -0.75}, int64[3] sh = {0, 2, -1}> {
        c = Conv <strides = [4, 4]> (x, wt)
        f = Reshape(c, sh)
        t = Transpose <perm = [0, 2, 1]> (f)
        e = Add(t, pos)
        y = Relu(e) }"""


def test_a_wrong_rewrite_of_a_model_whose_constants_fix_its_sizes_is_not_written(capsys, tmp_path):
    # the position embeddings fix the patch count: no size verification_dims tries runs the
    # original, so verification was "not possible" and the unsound rule's model was written
    # with exit 0; sizes read from the constants (eqsat.verification.constant_sizes) run it
    src, out, rep, rules = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json", tmp_path / "wrong.egg"
    onnx.save(onnx.parser.parse_model(VIT_PATCHES), str(src))
    rules.write_text('(ruleset wrong)\n(rewrite (Relu x) x :ruleset wrong :name "relu-is-identity")\n')
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--rules", rules, "--report", rep)
    assert rc == 1 and not out.exists(), err
    assert error_line(err).startswith("eqsat: error: verification failed, nothing written: output 'y': ")
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--report", rep, "-q")
    assert rc == 0, err
    v = json.loads(rep.read_text())["verification"]
    assert v["status"] == "passed" and "symbolic sizes batch=2, h=8, w=8" in v["detail"]


def test_a_closed_pipe_is_not_a_traceback():
    # `eqsat rules list | head -1`: the reader leaves early
    p = subprocess.Popen([sys.executable, "-m", "eqsat", "rules", "list"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait() in (0, 141), err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


@pytest.mark.parametrize("args", [
    ("optimize", "{m}", "-o", "{t}/o.onnx", "--report", "{t}/missing/r.json"),
    ("optimize", "{m}", "-o", "{t}/o.onnx", "--save-egraph", "{t}/missing/e.json"),
    ("optimize", "{m}", "-o", "{t}/missing/o.onnx"),
    ("optimize", "{m}", "-o", "{t}/o.onnx", "--plan", "{t}/missing/p.json"),
    ("compare-costs", "{m}", "--json", "{t}/missing/c.json"),
    ("calibrate", "-o", "{t}/missing/p.json"),
    ("plan", "{m}", "-o", "{t}/missing/p.json"),
    ("rules", "check", "--json", "{t}/missing/r.json"),
    ("conformance", "--json", "{t}/missing/c.json"),
    ("show", "{m}", "--html", "{t}/missing/g.html"),
])
def test_an_output_in_a_missing_folder_fails_before_any_work(capsys, model_path, tmp_path, args):
    """Every file a command writes is checked when it starts: one line, exit 2, nothing
    written (not a traceback after a long run)."""
    rc, _, err = run_cli(capsys, *(a.format(m=model_path, t=tmp_path) for a in args))
    assert rc == 2
    assert error_line(err).endswith(f"the output folder {tmp_path / 'missing'} does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


@pytest.mark.parametrize("text, says", [
    ("{nope", "not a readable JSON hardware profile"),
    ('["cpu"]', "a hardware profile is a JSON object, not list"),
    ('{"name": "x", "matmul_gflops": 1}', "the profile lacks vector_gflops, mem_gbps, kernel_overhead_us; "
                                          "`eqsat calibrate -o box.json` measures a complete one"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 0, "mem_gbps": "fast", "kernel_overhead_us": 1}',
     "vector_gflops = 0, mem_gbps = 'fast': rates must be numbers > 0"),
    # a quoted "false" was true; a zero or missing layout figure failed after saturation, a
    # misspelled key was ignored
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"fuse_attention": "false"}', "fuse_attention = 'false': must be true or false (JSON, unquoted)"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"fuse_atention": false}', "unknown key 'fuse_atention'; did you mean 'fuse_attention'?"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"layouts": {"nchwc": {"block": 8, "conv_speedup": 0}}}', "layouts.nchwc.conv_speedup = 0: must be a number > 0"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"layouts": {"nchwc": null}}', "layouts.nchwc = None: must be an object of figures"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"transcendental_flops": -5}', "transcendental_flops = -5: must be a number > 0"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"normalization_flops": 0}', "normalization_flops = 0: must be a number > 0"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"pool_gops": 0}', "pool_gops = 0: must be a number > 0"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"contraction_alias_slowdown": "1.4"}',
     "contraction_alias_slowdown = '1.4': must be a finite number > 0 (a time ratio"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"contraction_alias_slowdown": 1e400}', "contraction_alias_slowdown = inf: must be a finite number > 0"),
    ('{"name": "x", "matmul_gflops": 1, "vector_gflops": 1, "mem_gbps": 1, "kernel_overhead_us": 1, '
     '"narrow_conv_exponent": -0.3}', "narrow_conv_exponent = -0.3: must be a number from 0 to 4 (0: no slower)"),
])
def test_a_broken_hardware_profile_is_named_with_what_is_wrong(capsys, model_path, tmp_path, text, says):
    prof = tmp_path / "box.json"
    prof.write_text(text)
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", tmp_path / "o.onnx", "--hardware", prof)
    assert rc == 2
    assert error_line(err).startswith(f"eqsat: error: {prof}: ") and says in error_line(err)
    assert not (tmp_path / "o.onnx").exists()


def test_a_dim_the_model_lacks_is_a_warning(capsys, model_path, tmp_path):
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", tmp_path / "o.onnx", "-q", "--dim", "sequnce=64",
                         "--dim", "batch=2")
    assert rc == 0
    warn = [ln for ln in err.splitlines() if ln.startswith("eqsat: warning: --dim")]
    assert warn == ["eqsat: warning: --dim sequnce: the model has no symbolic dimension of that name "
                    "(its symbolic dimensions: batch)"]


def test_help_names_every_cost_model_and_extractor(capsys):
    from eqsat.extract import EXTRACTORS
    from eqsat.extract.costs import COST_MODELS

    with pytest.raises(SystemExit):
        main(["optimize", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in [*COST_MODELS, *EXTRACTORS]:
        assert name in text, name


def test_compare_costs_ranks_the_programs_it_timed(capsys, model_path, tmp_path):
    """compare-costs: one row per cost model, a unit on each prediction, and a JSON that
    keeps every program's latency and each model's prediction (from which tau is computed)."""
    from scipy.stats import kendalltau

    from eqsat.extract.costs import COST_MODELS

    out = tmp_path / "c.json"
    rc, text, err = run_cli(capsys, "compare-costs", model_path, "--samples", "3", "--runs", "3", "--json", out, "-q",
                            "--dim", "batch=2")
    assert rc == 0, err
    rows = [ln.split() for ln in text.splitlines() if ln.split() and ln.split()[0] in COST_MODELS]
    compared = [n for n, m in COST_MODELS.items() if m.compared_by_default]  # all but file-costs
    assert [r[0] for r in rows] == compared and rows[0][2] == "us" and rows[1][2] == "ops"
    data = json.loads(out.read_text())
    progs = data["programs"]
    assert len(progs) >= 1 and all(p["measured_ms"] > 0 and p["nodes"] > 0 for p in progs)
    for rec in data["cost_models"]:
        mine = [p for p in progs if rec["cost_model"] in p["chosen_by"]]
        assert len(mine) == 1 and mine[0]["predicted"][rec["cost_model"]] == pytest.approx(rec["predicted"])
        if len(progs) > 1 and rec["kendall_tau"] is not None:
            pred = [p["predicted"][rec["cost_model"]] for p in progs]
            assert rec["kendall_tau"] == pytest.approx(kendalltau(pred, [p["measured_ms"] for p in progs]).statistic)
            assert 0 <= rec["kendall_p"] <= 1
            if len(progs) >= 8:
                lo, hi = rec["kendall_tau_95"]
                assert -1 <= lo <= hi <= 1
            else:
                assert rec["kendall_tau_95"] is None


def test_compare_costs_takes_the_cost_models_and_extractor_named(capsys, model_path, tmp_path):
    out = tmp_path / "c.json"
    rc, text, err = run_cli(capsys, "compare-costs", model_path, "--samples", "2", "--runs", "2", "--json", out, "-q",
                            "--cost-model", "roofline", "--extractor", "tree-greedy", "--dim", "batch=2")
    assert rc == 0, err
    assert "each cost model's own chosen by tree-greedy" in text
    assert [(r["cost_model"], r["extractor"]) for r in json.loads(out.read_text())["cost_models"]] == [
        ("roofline", "tree-greedy")]
    rc, _, err = run_cli(capsys, "compare-costs", model_path, "--cost-model", "nope", "-q", "--dim", "batch=2")
    assert rc == 2 and "unknown cost model 'nope'; choose one of roofline, node-count, measured" in err
    # without the sizes, the cost models predicted at 16 while the programs ran at 2 (a KV
    # decoder's did not run at all)
    rc, _, err = run_cli(capsys, "compare-costs", model_path, "-q")
    assert rc == 2 and error_line(err) == (f"eqsat: error: {model_path}: compare-costs times the programs at the "
                                           "sizes its cost models predict for: give --dim batch=N")


def test_tau_interval_is_a_bootstrap_over_the_programs():
    from eqsat.backends.ort.compare_costs import kendall_p, tau_interval

    x = list(range(10))
    assert tau_interval(x, [v * 2.0 for v in x]) == (1.0, 1.0)  # every resample ranks them alike
    assert tau_interval(x, [-v for v in x]) == (-1.0, -1.0)
    # three programs ranked perfectly resample to [1, 1] too: too few for an interval; the
    # p-value says what three can: one random order in six ranks them as well
    assert tau_interval([1, 2, 3], [1, 2, 3]) is None
    assert kendall_p([1, 2, 3], [1, 2, 3]) == pytest.approx(1 / 6)
    assert kendall_p(x, [v * 2.0 for v in x]) < 1e-5
    assert kendall_p(x, [-v for v in x]) > 0.99  # ranking them backwards is no skill
    lo, hi = tau_interval(x, [3, 1, 4, 1.5, 5, 9, 2, 6, 5.5, 3.5])
    assert lo < 0 < 0.33 < hi and hi - lo > 0.5  # ten programs, tau 0.33: wide, and it holds chance
    assert tau_interval([1, 1, 1], [1, 2, 3]) is None  # all predicted alike: no tau


def test_files_named_like_onnxruntime_format_still_verify(capsys, model_path, tmp_path):
    # Verification runs the input and the written files; onnxruntime would read a path
    # ending in .ort as its own ORT format, and refuse an ONNX file there.
    ort_in = tmp_path / "in.ort"
    ort_in.write_bytes(model_path.read_bytes())
    for src, out in ((model_path, tmp_path / "o.ort"), (ort_in, tmp_path / "o.onnx")):
        rep = tmp_path / "r.json"
        rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "--report", rep, "-q")
        assert rc == 0 and "warning" not in err, err
        assert json.loads(rep.read_text())["verification"]["status"] == "passed"


def _terminated(patch: str, model_path: Path, out: Path) -> None:
    """Run `eqsat optimize` in a child after `patch` (Python that sends the child SIGTERM
    somewhere), and check that it ends with 143 and "eqsat: terminated"."""
    code = (patch + "from eqsat.cli.main import main\n"
            f"sys.exit(main(['optimize', {str(model_path)!r}, '-o', {str(out)!r}, '-q']))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 143 and p.stderr.strip() == "eqsat: terminated", p.stderr


def test_sigterm_during_verification_leaves_nothing_behind(model_path, tmp_path):
    # The output is written under a temporary name before verification runs; a SIGTERM
    # there (a job scheduler's kill) must clean it up as Ctrl-C does, also when it arrives
    # inside an `except Exception`, like verification's guards around onnxruntime calls.
    out = tmp_path / "out" / "o.onnx"
    out.parent.mkdir()
    _terminated("import os, signal, sys, time, eqsat.verification as v\n"
                "def verify(*a, **k):\n"
                "    try:\n"
                "        os.kill(os.getpid(), signal.SIGTERM)\n"
                "        time.sleep(5)\n"
                "    except Exception:\n"
                "        pass\n"
                "    return v.Verification('passed')\n"
                "v.verify = verify\n", model_path, out)
    assert list(out.parent.iterdir()) == []


def test_sigterm_during_saturation_is_not_taken_for_an_egglog_failure(model_path, tmp_path):
    # egglog's panics are BaseExceptions, so eqsat catches BaseException around egglog
    # calls; a SIGTERM raised there must still end the run with 143, not "egglog failed".
    out = tmp_path / "o.onnx"
    _terminated("import os, signal, sys, time, eqsat.core.saturate as s\n"
                "real = s.b.EGraph\n"
                "class Slow:\n"
                "    calls = 0\n"
                "    def __init__(self, *a, **k):\n"
                "        self._eg = real(*a, **k)\n"
                "    def __getattr__(self, name):\n"
                "        return getattr(self._eg, name)\n"
                "    def run_program(self, *cmds):\n"
                "        Slow.calls += 1\n"
                "        if Slow.calls == 3:\n"
                "            os.kill(os.getpid(), signal.SIGTERM)\n"
                "            time.sleep(5)\n"
                "        return self._eg.run_program(*cmds)\n"
                "s.b.EGraph = Slow\n", model_path, out)
    assert not out.exists()


def test_an_output_folder_that_refuses_files_is_refused_before_the_work(tmp_path, monkeypatch):
    # calibrate measured for 9 s, then failed to write (root ignores permissions, so the
    # folder's answer is simulated)
    from eqsat.cli import args as argtypes
    from eqsat.io import atomic

    monkeypatch.setattr(atomic.os, "access", lambda path, mode: False)
    with pytest.raises(argparse.ArgumentTypeError, match=f"the output folder {tmp_path} is not writable"):
        argtypes.output_file(str(tmp_path / "p.json"))


def test_a_profile_of_another_nchwc_block_is_warned_of(capsys, model_path, tmp_path, blocked):
    # the shipped profile of the other vector width: AVX2's (block 8) on an AVX-512 machine, or
    # the reverse; the optimized model still verifies, as its layout uses this machine's block
    from eqsat.extract.costs.roofline import HARDWARE_DIR

    name, theirs = ("cpu-avx2", 8) if blocked == 16 else ("cpu", 16)
    other = HARDWARE_DIR / f"{name}.json"  # a path: the name `cpu` stands for this machine's block
    rep = tmp_path / "r.json"
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", tmp_path / "o.onnx", "--hardware", other,
                         "--report", rep, "-q")
    assert rc == 0, err
    warning = (f"hardware profile {name} was measured with onnxruntime's NCHWc block {theirs}, this machine's "
               f"is {blocked}: its layout figures need not hold here")
    assert err.startswith(f"eqsat: warning: {warning}")  # shown even with -q
    assert any(w.startswith(warning) for w in json.loads(rep.read_text())["warnings"])
    rc, _, err = run_cli(capsys, "optimize", model_path, "-o", tmp_path / "o.onnx", "--hardware", other,
                         "--layout", "nchw", "-q")
    assert rc == 0 and err == ""


def test_target_onnx_keeps_a_contrib_op_the_input_holds(capsys, tmp_path):
    # it was "extraction failed: root e-class Op-28 has no finite-cost term": target onnx
    # forbade every contrib op, the input's own FusedMatMul included (found by tests/fuzz)
    w = onnx.numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "w")
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("FusedMatMul", ["x", "w"], ["m"], domain="com.microsoft", alpha=0.5),
         onnx.helper.make_node("Relu", ["m"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [onnx.helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    m = onnx.helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17),
                                                 onnx.helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(m, str(src))
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q", "--target", "onnx")
    assert rc == 0, err
    o = onnx.load(str(out))
    assert [(n.domain, n.op_type) for n in o.graph.node] == [("com.microsoft", "FusedMatMul"), ("", "Relu")]
    assert_same_outputs(m, o)
