"""External data locations: a model reads weights only from files inside its own folder.

An ONNX model names the file of each external tensor (`location`); a location that is
absolute, climbs out with `..`, or passes through a symbolic link that leads out of the
model's folder is refused (exit 2, one line naming the tensor and the location) before any
byte is read, wherever the tensor lives (initializers, Constant nodes, subgraphs, sparse
tensors, model-local functions, training graphs), in every command that reads a model.
onnxruntime refuses these locations too. What eqsat writes keeps its weights in OUT.data,
a name never taken from the model.
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

from .test_cli import error_line, run_cli

SMALL = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
LARGE = np.arange(2 * 16384, dtype=np.float32).reshape(2, 16384) / 7  # 128 KiB: kept on disk at load
SECRET = b"SECRET!!" * 3  # 6 floats


def _external(arr: np.ndarray, name: str, loc: str) -> onnx.TensorProto:
    t = onnx.numpy_helper.from_array(arr, name)
    t.ClearField("raw_data")
    t.data_location = TP.EXTERNAL
    for k, v in (("location", loc), ("offset", "0"), ("length", str(arr.nbytes))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def _io(shape) -> tuple[onnx.ValueInfoProto, onnx.ValueInfoProto]:
    return h.make_tensor_value_info("x", TP.FLOAT, shape), h.make_tensor_value_info("y", TP.FLOAT, shape)


def _model(holder: str, loc: str) -> onnx.ModelProto:
    """y = x + w, where w's data is at `loc` and `holder` says where the tensor lives."""
    arr = LARGE if holder == "large initializer" else SMALL
    x, y = _io(arr.shape)
    w = _external(arr, "w", loc)
    inits, nodes, functions = [], [], []
    if holder in ("initializer", "large initializer"):
        inits, nodes = [w], [h.make_node("Add", ["x", "w"], ["y"])]
    elif holder == "constant":
        w.name = ""  # a Constant's value tensor usually has no name: the node names it
        nodes = [h.make_node("Constant", [], ["k"], name="const_k", value=w), h.make_node("Add", ["x", "k"], ["y"])]
    elif holder in ("subgraph initializer", "subgraph constant"):
        then_nodes = [h.make_node("Add", ["x", "w"], ["t"])]
        then_inits = [w]
        if holder == "subgraph constant":
            then_nodes.insert(0, h.make_node("Constant", [], ["w"], value=w))
            then_inits = []
        then = h.make_graph(then_nodes, "then", [], [h.make_tensor_value_info("t", TP.FLOAT, arr.shape)], then_inits)
        other = h.make_graph([h.make_node("Neg", ["x"], ["e"])], "else", [],
                             [h.make_tensor_value_info("e", TP.FLOAT, arr.shape)])
        nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                 h.make_node("Greater", ["s", "zero"], ["c"]),
                 h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
        inits = [onnx.numpy_helper.from_array(np.float32(-1e9), "zero")]
    elif holder == "sparse constant":
        values = _external(SMALL.ravel(), "w", loc)
        sparse = h.make_sparse_tensor(values, h.make_tensor("i", TP.INT64, [6], list(range(6))), [2, 3])
        nodes = [h.make_node("Constant", [], ["k"], sparse_value=sparse), h.make_node("Add", ["x", "k"], ["y"])]
    elif holder == "function constant":
        body = [h.make_node("Constant", [], ["k"], value=w), h.make_node("Add", ["a", "k"], ["b"])]
        functions = [h.make_function("local", "AddW", ["a"], ["b"], body, [h.make_opsetid("", 18)])]
        nodes = [h.make_node("AddW", ["x"], ["y"], domain="local")]
    elif holder == "training initializer":
        nodes = [h.make_node("Relu", ["x"], ["y"])]
    else:
        raise AssertionError(holder)
    g = h.make_graph(nodes, "g", [x], [y], inits)
    imports = [h.make_opsetid("", 18)] + ([h.make_opsetid("local", 1)] if functions else [])
    m = h.make_model(g, opset_imports=imports, functions=functions)
    m.ir_version = 8
    if holder == "training initializer":
        ti = m.training_info.add()
        ti.initialization.name = "init"
        ti.initialization.initializer.append(w)
        ti.algorithm.name = "algo"
    return m


HOLDERS = ["initializer", "large initializer", "constant", "subgraph initializer", "subgraph constant",
           "sparse constant", "function constant", "training initializer"]


@pytest.fixture
def tree(tmp_path) -> Path:
    """tmp_path/secret.bin beside the model's folder tmp_path/m/, which holds w.bin, sub/w.bin,
    a link to the secret, a link to w.bin, and a link to its own parent folder."""
    m = tmp_path / "m"
    (m / "sub").mkdir(parents=True)
    for holder_data in (LARGE,):
        (m / "large.bin").write_bytes(holder_data.tobytes())
    (m / "w.bin").write_bytes(SMALL.tobytes())
    (m / "sub" / "w.bin").write_bytes(SMALL.tobytes())
    (tmp_path / "secret.bin").write_bytes(SECRET + LARGE.tobytes()[len(SECRET):])
    (m / "out_link.bin").symlink_to(tmp_path / "secret.bin")
    (m / "in_link.bin").symlink_to(m / "w.bin")
    (m / "up").symlink_to(tmp_path)
    return m


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _outside(tree: Path) -> list[str]:
    secret = tree.parent / "secret.bin"
    return ["../secret.bin", "../../../../../../../../.." + str(secret), str(secret), "out_link.bin",
            "up/secret.bin", "sub/../../secret.bin", str(tree / "w.bin")]  # absolute, even inside


@pytest.mark.parametrize("holder", HOLDERS)
def test_a_location_outside_the_models_folder_is_refused_wherever_the_tensor_is(capsys, tree, holder):
    # a small initializer, a Constant, a subgraph's tensors were read and written inline
    # into the output, exit 0; only a large initializer was refused (by the checker)
    before = _listing(tree.parent)
    for loc in _outside(tree):
        src = tree / "model.onnx"
        onnx.save(_model(holder, loc), str(src))
        rc, out, err = run_cli(capsys, "optimize", src, "-o", tree / "o.onnx", "-q", "--no-verify")
        assert rc == 2, (loc, err)
        line = error_line(err)
        label = "node 'const_k'" if holder == "constant" else "tensor 'w'"
        assert line.startswith(f"eqsat: error: {src}: {label}: external data location '{loc}' "), line
        assert ("is absolute" if os.path.isabs(loc) else "leads outside the model's folder") in line, line
        assert "Traceback" not in err and "SECRET" not in out + err
        assert _listing(tree.parent) == sorted([*before, "m/model.onnx"]), loc  # no output, no temporary
        src.unlink()


@pytest.mark.parametrize("command", [["optimize", "{m}", "--no-verify"], ["plan", "{m}"], ["show", "{m}"],
                                     ["diff", "{m}", "{m}"], ["compare-costs", "{m}", "--samples", "1"]])
def test_every_command_refuses_a_location_outside_the_models_folder(capsys, tree, command):
    src = tree / "model.onnx"
    for holder in ("initializer", "constant"):
        onnx.save(_model(holder, "../secret.bin"), str(src))
        rc, out, err = run_cli(capsys, *[a.format(m=src) for a in command])
        assert rc == 2, err
        assert "external data location '../secret.bin' leads outside the model's folder" in error_line(err)
        assert "SECRET" not in out + err


def test_no_byte_is_read_before_every_location_is_checked(capsys, tree, monkeypatch):
    # the first tensor is fine, the second is not: neither file is opened
    m = _model("initializer", "w.bin")
    m.graph.initializer.append(_external(SMALL, "v", "../secret.bin"))
    m.graph.node.append(h.make_node("Add", ["y", "v"], ["z"]))
    m.graph.output[0].name = "z"
    src = tree / "model.onnx"
    onnx.save(m, str(src))
    opened, real_open = [], builtins.open

    def spy(file, *a, **k):
        opened.append(str(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(builtins, "open", spy)
    rc, _, err = run_cli(capsys, "optimize", src, "-q")
    monkeypatch.undo()
    assert rc == 2 and "tensor 'v': external data location '../secret.bin'" in error_line(err)
    assert not [f for f in opened if f.endswith(".bin")], opened


@pytest.mark.parametrize("info, message", [
    ({"offset": "x"}, "external data offset 'x' is not an integer >= 0"),
    ({"offset": "-8"}, "external data offset '-8' is not an integer >= 0"),
    ({"length": "-1"}, "external data length '-1' is not an integer >= 0"),
    ({"offset": "20"}, "external data runs past the end of 'w.bin' (truncated file?)"),
    ({"location": "w.bin\0"}, "external data location 'w.bin\\x00' is not a file name"),
    ({"location": ""}, "external data has no location"),
    ({"location": "missing.bin"}, "external data file 'missing.bin' not found in the model's folder {m}"),
    ({"location": "sub"}, "external data location 'sub' is not a regular file"),
])
def test_a_malformed_external_reference_is_one_line(capsys, tree, info, message):
    m = _model("initializer", "w.bin")
    for e in m.graph.initializer[0].external_data:
        e.value = info.get(e.key, e.value)
    src = tree / "model.onnx"
    src.write_bytes(m.SerializeToString())
    rc, _, err = run_cli(capsys, "optimize", src, "-q")
    assert rc == 2, err
    assert error_line(err) == f"eqsat: error: {src}: tensor 'w': {message.format(m=tree)}"


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("loc", ["w.bin", "./w.bin", "sub/w.bin", "sub/../w.bin", "in_link.bin", "up/m/w.bin"])
def test_a_location_inside_the_models_folder_is_read(capsys, tree, loc):
    # onnxruntime runs these too; the output holds the same numbers
    src = tree / "model.onnx"
    onnx.save(_model("initializer", loc), str(src))
    out = tree.parent / "out" / "o.onnx"
    out.parent.mkdir()
    rc, _, err = run_cli(capsys, "optimize", src, "-o", out, "-q")
    assert rc == 0, err
    x = np.random.default_rng(0).standard_normal(SMALL.shape).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), x + SMALL, rtol=1e-6)
    np.testing.assert_allclose(_run(src, x), x + SMALL, rtol=1e-6)


def _tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """Every tensor of a model: graphs (main, subgraphs, training), functions, sparse values."""
    found = []

    def graph(g):
        found.extend(g.initializer)
        for s in g.sparse_initializer:
            found.extend([s.values, s.indices])
        nodes(g.node)

    def nodes(ns):
        for n in ns:
            for a in n.attribute:
                found.extend([a.t] if a.HasField("t") else [])
                found.extend(a.tensors)
                for s in [a.sparse_tensor] if a.HasField("sparse_tensor") else []:
                    found.extend([s.values, s.indices])
                for g in [a.g] if a.HasField("g") else []:
                    graph(g)
                for g in a.graphs:
                    graph(g)

    graph(model.graph)
    for f in model.functions:
        nodes(f.node)
    for ti in model.training_info:
        graph(ti.initialization)
        graph(ti.algorithm)
    return found


@pytest.mark.parametrize("holder", ["large initializer", "constant", "subgraph initializer", "subgraph constant",
                                    "function constant", "training initializer"])
def test_the_output_keeps_its_weights_in_its_own_data_file(capsys, tree, holder):
    # tensors outside the main graph's initializers kept the model's own location, which
    # the output then read from its own folder (another file, or none)
    loc = "large.bin" if holder == "large initializer" else "w.bin"
    src = tree / "model.onnx"
    onnx.save(_model(holder, loc), str(src))
    outdir = tree.parent / "out"
    outdir.mkdir()
    (outdir / loc).write_bytes(np.zeros(LARGE.size, np.float32).tobytes())  # a decoy with the model's name
    rc, _, err = run_cli(capsys, "optimize", src, "-o", outdir / "o.onnx", "-q")
    assert rc == 0, err
    got = onnx.load(str(outdir / "o.onnx"), load_external_data=False)
    locations = {e.value for t in _tensors(got) for e in t.external_data if e.key == "location"}
    assert locations <= {"o.onnx.data"}, locations
    arr = LARGE if holder == "large initializer" else SMALL
    x = np.random.default_rng(0).standard_normal(arr.shape).astype(np.float32)
    if holder != "training initializer":
        np.testing.assert_allclose(_run(outdir / "o.onnx", x), x + arr, rtol=1e-5)
    else:
        init = [t for t in _tensors(got) if t.name == "w"]
        assert len(init) == 1
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(init[0], str(outdir)), SMALL)


def test_the_output_never_overwrites_a_data_file_a_function_reads(capsys, tree):
    # only the main graph's tensors were searched for the input's data files
    src = tree / "model.onnx"
    onnx.save(_model("function constant", "c.onnx.data"), str(src))
    (tree / "c.onnx.data").write_bytes(SMALL.tobytes())
    rc, _, err = run_cli(capsys, "optimize", src, "-o", tree / "c.onnx", "-q")
    assert rc == 2
    assert error_line(err).endswith(f"would overwrite {tree / 'c.onnx.data'}, the input's data file; "
                                    "name another file")
    assert (tree / "c.onnx.data").read_bytes() == SMALL.tobytes()


def test_a_model_with_external_data_eqsat_did_not_bind_is_never_written(tmp_path):
    # a model read without eqsat.io.modelio (onnx.load(..., load_external_data=False)) kept its
    # relative locations: written elsewhere, it would read whatever file has that name there
    from eqsat.errors import OptimizeError
    from eqsat.io import modelio

    for holder, label in (("constant", "node 'const_k'"), ("initializer", "tensor 'w'"),
                          ("function constant", "tensor 'w'")):
        with pytest.raises(OptimizeError, match=f"^{label} keeps its data at 'w.bin', relative to no folder: "
                                                "read the model with eqsat.io.modelio.load_model before writing it$"):
            modelio.save_model(_model(holder, "w.bin"), tmp_path / "o.onnx", check=False)
        assert list(tmp_path.iterdir()) == []
