"""Command-line scenarios over invalid inputs other than a model's own bytes: external data
locations, rule files, saved e-graphs and choice files, environment variables, and
arguments (bad values, output paths eqsat cannot or must not write).

A `Scenario` is files to lay out in an empty temporary folder, the arguments of one `eqsat`
command and its environment. `{d}` in any path or argument stands for that folder. The
property (invalid_props.scenario_is_clean) holds eqsat to exit 1 or 2 with one error line
and the folder as it was, or to exit 0 having written only what it was asked to, and a
model that computes what the input does.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper

from .strategies import cases


@dataclass
class Scenario:
    what: str
    args: list[str]
    files: dict[str, bytes | onnx.ModelProto] = field(default_factory=dict)  # relative path -> content
    links: dict[str, str] = field(default_factory=dict)  # relative path -> link target
    env: dict[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()  # relative paths the command is asked to write
    model: str = ""  # the input model (relative path), compared with outputs[0] on success
    subprocess: bool = False  # run `python -m eqsat` (environment variables)
    verdict_ok: bool = False  # exit 1 may be a command's verdict (rules check, extract --check)
    must_refuse: bool = False  # exit 0 is wrong whatever is written (data read from outside the folder)
    input_must_run: bool = False  # exit 0 is wrong where onnxruntime cannot load the input

    def __repr__(self) -> str:
        files = {k: (v[:120] if isinstance(v, bytes) and not k.endswith(".onnx") else "<model>")
                 for k, v in self.files.items()}
        return f"Scenario({self.what!r}, args={self.args}, env={self.env}, links={self.links}, files={files})"


def mlp(overridable: bool = False) -> onnx.ModelProto:
    """x[N, 4] -> MatMul -> Add -> Relu -> MatMul -> y[N, 3], weights as initializers."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2")]
    nodes = [h.make_node("MatMul", ["x", "w1"], ["a"]), h.make_node("Add", ["a", "b1"], ["b"]),
             h.make_node("Relu", ["b"], ["c"]), h.make_node("MatMul", ["c", "w2"], ["y"])]
    ins = [h.make_tensor_value_info("x", TP.FLOAT, ["N", 4])]
    if overridable:
        ins.append(h.make_tensor_value_info("b1", TP.FLOAT, [8]))
    g = h.make_graph(nodes, "mlp", ins, [h.make_tensor_value_info("y", TP.FLOAT, ["N", 3])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def convnet() -> onnx.ModelProto:
    """x[1, 8, 6, 6] -> Conv 3x3 -> BatchNormalization -> Relu -> MaxPool -> y (NCHWc candidates)."""
    rng = np.random.default_rng(1)
    c = 8
    inits = [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
             numpy_helper.from_array((np.abs(rng.standard_normal(c)) + 0.5).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "beta"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "mean"),
             numpy_helper.from_array((np.abs(rng.standard_normal(c)) + 0.5).astype(np.float32), "var")]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["a", "s", "beta", "mean", "var"], ["n"]),
             h.make_node("Relu", ["n"], ["r"]),
             h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    g = h.make_graph(nodes, "conv", [h.make_tensor_value_info("x", TP.FLOAT, [1, c, 6, 6])],
                     [h.make_tensor_value_info("y", TP.FLOAT, [1, c, 3, 3])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _bytes(m: onnx.ModelProto) -> bytes:
    return m.SerializeToString()


# ---- external data


def _externalize(m: onnx.ModelProto, location: str) -> tuple[onnx.ModelProto, bytes]:
    """The model with every initializer in one data file at `location`; and that file's bytes."""
    m = copy.deepcopy(m)
    blob = b""
    for t in m.graph.initializer:
        raw = numpy_helper.to_array(t).tobytes()
        offset = len(blob)
        blob += raw
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.ClearField("raw_data")
        t.data_location = TP.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(len(raw)))):
            t.external_data.add(key=k, value=v)
    return m, blob


@st.composite
def external_data(draw) -> Scenario:
    base = draw(st.sampled_from(["mlp", "conv", "mlp-overridable"]))
    m0 = {"mlp": mlp, "conv": convnet, "mlp-overridable": lambda: mlp(True)}[base]()
    kind = draw(st.sampled_from(["location", "location", "link", "offset", "length", "keys", "missing", "ok"]))
    location, files, links = "w.bin", {}, {}
    m, blob = _externalize(m0, "w.bin")
    files["sub/w.bin"] = blob
    what = kind
    if kind == "location":
        location = draw(st.sampled_from([
            "../w.bin", "../outside/w.bin", "{d}/sub/w.bin", "/etc/hostname", "", ".", "sub", "w.bin/..",
            "./w.bin", "nested/../w.bin", "nested/../../w.bin", "W.BIN", "w.bin\x00x", "~/w.bin", "x" * 300,
            "/proc/self/environ", "..", "//w.bin"]))
        files["w.bin"] = blob
        files["outside/w.bin"] = blob
        files["sub/nested/.keep"] = b""
        what = f"location {location!r}"
    elif kind == "link":
        target = draw(st.sampled_from(["../outside/w.bin", "{d}/outside/w.bin", "w2.bin", "/etc/hostname",
                                       "missing.bin", "../sub"]))
        files["outside/w.bin"] = blob
        files["sub/w2.bin"] = blob
        del files["sub/w.bin"]
        links["sub/w.bin"] = target
        what = f"w.bin a link to {target!r}"
    elif kind == "missing":
        del files["sub/w.bin"]
        what = "the data file missing"
    elif kind == "ok":
        what = "valid external data"
    if kind in ("location", "link", "missing", "ok"):
        for t in m.graph.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = location
    else:
        t = m.graph.initializer[draw(st.integers(0, len(m.graph.initializer) - 1))]
        entries = {e.key: e for e in t.external_data}
        if kind in ("offset", "length"):
            v = draw(st.sampled_from(["-1", str(len(blob)), str(len(blob) + 5), str(2**63 - 1), str(2**64),
                                      "abc", "1e3", " 4", "4 ", "0x10", "", "3", "4096"]))
            entries[kind].value = v
            what = f"{kind} of {t.name} {v!r}"
        else:
            how = draw(st.sampled_from(["unknown", "duplicate", "no-location", "raw-too", "checksum"]))
            if how == "unknown":
                t.external_data.add(key="color", value="blue")
            elif how == "duplicate":
                t.external_data.add(key="location", value="../outside/w.bin")
                files["outside/w.bin"] = blob
            elif how == "no-location":
                t.external_data.remove(entries["location"])
            elif how == "raw-too":
                t.raw_data = b"\x00" * 4
            else:
                t.external_data.add(key="checksum", value="0")
            what = f"external_data keys: {how} on {t.name}"
    files["sub/m.onnx"] = m  # serialized when laid out, with {d} in its locations replaced
    args = ["optimize", "{d}/sub/m.onnx", "-o", "{d}/sub/o.onnx", "-q"]
    escapes = (location in ESCAPING) or (kind == "link" and links["sub/w.bin"] != "w2.bin")
    return Scenario(what, args, files, links, outputs=("sub/o.onnx", "sub/o.onnx.data"), model="sub/m.onnx",
                    must_refuse=escapes, input_must_run=True)


# locations that leave the model's folder (sub/): eqsat must refuse them whatever they hold
ESCAPING = ("../w.bin", "../outside/w.bin", "{d}/sub/w.bin", "/etc/hostname", "nested/../../w.bin",
            "/proc/self/environ", "..", "//w.bin")


# ---- rule files

OPS = ("Relu", "Neg", "Abs", "Add", "Mul", "Sub", "Div", "MatMul", "Sigmoid", "Tanh", "Identity", "Transpose",
       "Reshape", "Conv", "Gemm", "Exp", "NotAnOp", "ScalarF", "ScalarI", "Const", "Ints", "shape", "IsConst")
KEYWORDS = ("rewrite", "rule", "birewrite", "union", "let", "set", "delete", "subsume", "panic", "extract", "check",
            "run", "run-schedule", "push", "pop", "print-function", "print-size", "output", "input", "include",
            "fail", "relation", "function", "datatype", "sort", "constructor", "ruleset", "py-eval", "query-extract",
            "set-option", "unstable-fn", "saturate", "seq", "repeat", "let-scheduler", "prove", "simplify")
ATOMS = ("x", "y", "z", "_", ":ruleset", "fusion", "cleanup", "algebra", ":name", ":when", ":merge", "i64", "f64",
         "String", "Op", "0", "-1", "9223372036854775807", "99999999999999999999", "1.0", "NaN", "inf", "1e400",
         '"s"', '"/etc/passwd"', '"../x.egg"', '"\\"', "\"unterminated", ";comment", "(", ")", "#", "é")


@st.composite
def sexp(draw, depth: int = 3) -> str:
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(ATOMS + OPS))
    head = draw(st.sampled_from(KEYWORDS + OPS))
    args = [draw(sexp(depth - 1)) for _ in range(draw(st.integers(0, 4)))]
    return "(" + " ".join([head, *args]) + ")"


@st.composite
def rule_text(draw) -> tuple[str, str]:
    kind = draw(st.sampled_from(["random", "random", "rewrite", "command", "unbalanced", "bytes"]))
    if kind == "random":
        return "\n".join(draw(sexp()) for _ in range(draw(st.integers(1, 4)))), "random s-expressions"
    if kind == "rewrite":  # well formed, sound or not
        a, b = draw(st.sampled_from(OPS[:12])), draw(st.sampled_from(OPS[:12]))
        lhs = draw(st.sampled_from([f"({a} x)", f"({a} x y)", f"({a} ({b} x))", "x"]))
        rhs = draw(st.sampled_from([f"({b} x)", "x", f"({b} x y)", f"({a} y x)", "(Neg x)"]))
        rs = draw(st.sampled_from(["fusion", "cleanup", "algebra", "nosuch", ""]))
        opts = (f" :ruleset {rs}" if rs else "") + draw(st.sampled_from(["", ' :name "r"', " :name 3"]))
        return f"(rewrite {lhs} {rhs}{opts})", "a rewrite"
    if kind == "command":
        c = draw(st.sampled_from([
            '(output "{d}/leak.txt" (Relu x))', '(input IsConst "{d}/in.csv")', '(include "{d}/inc.egg")',
            '(py-eval "open(\'{d}/leak.txt\', \'w\')")', "(push)", "(pop)", "(run 1000000)",
            "(extract (Relu x))", "(panic \"boom\")", "(fail (check (= 1 2)))", "(set-option enable_proofs 1)",
            "(ruleset fusion)", "(datatype Op (Relu Op))", "(function f (i64) i64 :merge new)",
            "(print-size)", "(check (= 1 1))"]))
        return c, f"a command: {c[:30]}"
    if kind == "unbalanced":
        t = draw(sexp())
        i = draw(st.integers(0, len(t)))
        return t[:i] + draw(st.sampled_from(["(", ")", '"', ""])) + t[i:], "unbalanced"
    return draw(st.binary(max_size=64)).decode("latin-1"), "random characters"


@st.composite
def rule_files(draw) -> Scenario:
    text, what = draw(rule_text())
    case = draw(cases())
    cmd = draw(st.sampled_from(["optimize", "optimize", "optimize-only", "check", "list"]))
    files = {"r.egg": text.encode("utf-8", "surrogateescape"), "m.onnx": _bytes(case.model),
             "inc.egg": b"(rewrite (Relu x) (Neg x))", "in.csv": b"1\n"}
    if cmd == "check":
        return Scenario(what, ["rules", "check", "{d}/r.egg"], files, verdict_ok=True)
    if cmd == "list":
        return Scenario(what, ["rules", "list", "--rules", "{d}/r.egg"], files)
    args = ["optimize", "{d}/m.onnx", "-o", "{d}/o.onnx", "-q", "--rules", "{d}/r.egg"]
    if cmd == "optimize-only":
        args.append("--no-default-rules")
    return Scenario(what, args, files, outputs=("o.onnx",), model="m.onnx")


# ---- saved e-graphs and choice files

_SAVED: dict[str, tuple[bytes, dict, dict]] = {}


def saved(name: str) -> tuple[bytes, dict, dict]:
    """(model bytes, e-graph JSON, choice JSON) of a base model, made once per process."""
    if name not in _SAVED:
        import tempfile
        from pathlib import Path

        from eqsat.core.pipeline import Options, optimize
        from eqsat.extract import choice_file

        m = {"mlp": mlp, "conv": convnet}[name]()
        with tempfile.TemporaryDirectory() as d:
            eg = Path(d) / "e.json"
            res = optimize(m, Options(save_egraph=eg, layout="nchw"))
            data = json.loads(eg.read_text())
            ch = Path(d) / "c.json"
            from .clirun import in_process

            rc, _, err = in_process(["extract", eg, "-o", ch])
            assert rc == 0, err
            choice = json.loads(ch.read_text())
        del res, choice_file
        _SAVED[name] = (_bytes(m), data, choice)
    return _SAVED[name]


def _paths(obj, prefix=()) -> list[tuple]:
    """Paths to every value in a JSON document, up to 4 deep, sampling big containers."""
    out = [prefix]
    if len(prefix) >= 4:
        return out
    if isinstance(obj, dict):
        keys = list(obj)[:6] + list(obj)[-3:]
        for k in dict.fromkeys(keys):
            out += _paths(obj[k], (*prefix, k))
    elif isinstance(obj, list):
        for i in sorted({0, len(obj) // 2, len(obj) - 1}):
            if 0 <= i < len(obj):
                out += _paths(obj[i], (*prefix, i))
    return out


REPLACEMENTS = (None, math.nan, -1, -1.5, math.inf, -math.inf, 2**70, "x", "", [], {}, True, 0, "nowhere",
                ["nowhere"], {"op": 1})


@st.composite
def json_mutation(draw, doc) -> tuple[object, str]:
    doc = copy.deepcopy(doc)
    paths = _paths(doc)
    path = draw(st.sampled_from(paths))
    how = draw(st.sampled_from(["replace", "replace", "delete", "dangling", "cost"]))
    if not path:
        return draw(st.sampled_from(REPLACEMENTS)), "the whole document replaced"
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    if how == "delete":
        del parent[last]
        return doc, f"deleted {path}"
    if how == "dangling" and isinstance(parent[last], list) and parent[last]:
        parent[last][0] = "no-such-node"
        return doc, f"a dangling reference at {path}"
    if how == "cost":
        v = draw(st.sampled_from([math.nan, -1.0, math.inf, -math.inf, 1e308, 0.0, "1"]))
        for node in list(doc.get("nodes", {}).values())[:3] if isinstance(doc, dict) else []:
            if isinstance(node, dict):
                node["cost"] = v
        return doc, f"costs set to {v}"
    v = draw(st.sampled_from(REPLACEMENTS))
    parent[last] = v
    return doc, f"{path} set to {v!r}"


@st.composite
def egraph_files(draw) -> Scenario:
    name = draw(st.sampled_from(["mlp", "conv"]))
    model, eg, choice = saved(name)
    target = draw(st.sampled_from(["egraph", "egraph", "choice", "choice-optimize", "text"]))
    files = {"m.onnx": model, "e.json": json.dumps(eg).encode(), "c.json": json.dumps(choice).encode()}
    if target == "text":
        raw = json.dumps(eg).encode()
        i = draw(st.integers(0, len(raw) - 1))
        files["e.json"] = draw(st.sampled_from([raw[:i], raw[:i] + b"\xff\xfe" + raw[i:], b"", b"null"]))
        what = "e-graph text spoiled"
    else:
        doc, what = draw(json_mutation(choice if target.startswith("choice") else eg))
        files["c.json" if target.startswith("choice") else "e.json"] = json.dumps(doc).encode()
    if target == "choice-optimize":
        args = ["optimize", "{d}/m.onnx", "--choice", "{d}/c.json", "-o", "{d}/o.onnx", "-q", "--layout", "nchw"]
        return Scenario(what, args, files, outputs=("o.onnx",), model="m.onnx")
    if target == "choice":
        return Scenario(what, ["extract", "{d}/e.json", "--check", "{d}/c.json"], files, verdict_ok=True)
    extra = draw(st.sampled_from([[], ["-o", "{d}/out.json"], ["--extractor", "dag-greedy"],
                                  ["--cost-model", "roofline"], ["--extractor", "tree-greedy", "--dim", "N=4"]]))
    return Scenario(what, ["extract", "{d}/e.json", *extra], files,
                    outputs=("out.json",) if "-o" in extra else ())


# ---- environment variables

ENV_VALUES = {
    "EQSAT_NCHWC_BLOCK": ["abc", "-1", "0", "1", "3", "8", "16", "1e9", "", " 16 ", "99999999999999999999", "٣",
                          "16\n"],
    "EQSAT_NCHWC": ["0", "1", "no", "", "false", "2", " 1", "yes"],
    "EQSAT_REUSE_MEMORY": ["0", "1", "abc", "", "2"],
    "EQSAT_ILP_DISP": ["0", "1", "abc", ""],
    "EQSAT_CACHE": ["{d}/cache", "{d}/cachefile", "{d}/missing/deeper", "", "/proc/eqsat-fuzz", "{d}/badcache"],
}


@st.composite
def environments(draw) -> Scenario:
    names = draw(st.lists(st.sampled_from(sorted(ENV_VALUES)), min_size=1, max_size=2, unique=True))
    env = {n: draw(st.sampled_from(ENV_VALUES[n])) for n in names}
    base = draw(st.sampled_from(["mlp", "conv"]))
    files = {"m.onnx": _bytes({"mlp": mlp, "conv": convnet}[base]()), "cachefile": b"not a folder",
             "badcache/measured.json": draw(st.sampled_from([b"{", b"[]", b'{"k": "x"}', b'{"k": -1}', b"NaN",
                                                             b"\xff"]))}
    outputs = ["o.onnx"]
    args = ["optimize", "{d}/m.onnx", "-o", "{d}/o.onnx", "-q"]
    if "EQSAT_CACHE" in env:
        args += ["--cost-model", "measured"]
        outputs += ["cache/measured.json", "missing/deeper/measured.json", "cache", "missing", "missing/deeper",
                    "badcache/measured.json"]
    return Scenario(f"environment {env}", args, files, env=env, outputs=tuple(outputs), model="m.onnx",
                    subprocess=True)


# ---- arguments

FLAG_VALUES = {
    "--iter-limit": ["0", "-1", "abc", "1e3", "nan", "99999999999999999999", "1"],
    "--node-limit": ["0", "-5", "1", "10", "inf"],
    "--time-limit": ["nan", "inf", "-1", "0", "1e-300", "0.001"],
    "--extract-time-limit": ["nan", "0", "-1", "inf", "1e-9"],
    "--fold-limit": ["0", "-1", "1", "abc"],
    "--verify-runs": ["0", "-1", "3", "x"],
    "--rtol": ["nan", "-1", "inf", "0"],
    "--atol": ["nan", "-1e-3", "inf", "0"],
    "--dim": ["N=-1", "N=0", "N=abc", "=3", "N", "N=1e3", "M=2", "N=3=4", "N=99999999999"],
    "--hardware": ["nosuch", "{d}/m.onnx", "{d}/bad.json", "{d}", "/etc/hostname", "h200", "cpu-avx2"],
    "--cost-model": ["bogus", "", "roofline", "node-count"],
    "--extractor": ["bogus", "", "ilp", "tree-greedy"],
    "--target": ["bogus", "onnx", "ort"],
    "--layout": ["nchwc", "nchw", "blocked"],
    "--choice": ["{d}/m.onnx", "{d}/missing.json", "{d}"],
    "--rules": ["{d}/missing.egg", "{d}", "{d}/m.onnx"],
    "-o": ["{d}/missing/o.onnx", "{d}/m.onnx", "{d}", "{d}/m.onnx/o.onnx", "/proc/eqsat-fuzz.onnx", "",
           "{d}/o.onnx"],
    "--report": ["{d}/missing/r.json", "{d}/m.onnx", "{d}", "/proc/eqsat-fuzz.json", "{d}/o.onnx", "{d}/r.json"],
    "--save-egraph": ["{d}/m.onnx", "{d}/missing/e.json", "/proc/eqsat-fuzz.json", "{d}/e.json"],
    "--plan": ["{d}/missing/p.json", "{d}/m.onnx", "{d}/p.json"],
}
BARE_FLAGS = ("--in-place", "--no-verify", "--require-verification", "--no-default-rules", "--explain", "--bogus",
              "-q")


@st.composite
def arguments(draw) -> Scenario:
    flags = draw(st.lists(st.sampled_from(sorted(FLAG_VALUES)), min_size=1, max_size=3, unique=True))
    args = ["optimize", "{d}/m.onnx"]
    for f in flags:
        args += [f, draw(st.sampled_from(FLAG_VALUES[f]))]
    args += draw(st.lists(st.sampled_from(BARE_FLAGS), max_size=2, unique=True))
    if "-o" not in flags:
        args += ["-o", "{d}/o.onnx"]
    if "-q" not in args:
        args.append("-q")
    files = {"m.onnx": _bytes(mlp(overridable=draw(st.booleans()))), "bad.json": b'{"layouts": 3}'}
    outputs = ("o.onnx", "r.json", "e.json", "p.json", "m.onnx")  # m.onnx only with --in-place (checked)
    return Scenario(f"arguments {args[2:]}", args, files, outputs=outputs, model="m.onnx")
