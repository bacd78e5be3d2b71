"""Models over 2 GiB: loaded with their external data, written with external data (one
protobuf cannot hold them), outputs unchanged. The test generates its own 2.1 GiB model."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat.cli.main import main
from eqsat.io.modelio import load_model, save_model
from eqsat.verification import compare, run

ROWS, COLS = 262_144 * 2 + 16, 1024  # 2,147,549,184 bytes of float32: just over 2 GiB


def _big_model(path) -> None:
    """Written field by field: protobuf cannot copy or serialize more than 2 GiB at once."""
    table = np.zeros((ROWS, COLS), np.float32)
    table[:, 0] = np.arange(ROWS, dtype=np.float32)
    table[-1, :] = 7.0
    data = path.parent / "big.onnx.data"
    table.tofile(data)
    del table
    m = helper.make_model(
        helper.make_graph(
            [helper.make_node("Gather", ["table", "ids"], ["rows"]), helper.make_node("Identity", ["rows"], ["y"])],
            "big",
            [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, COLS])],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    t = m.graph.initializer.add()
    t.name, t.data_type = "table", TensorProto.FLOAT
    t.dims.extend([ROWS, COLS])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", data.name), ("offset", "0"), ("length", str(data.stat().st_size))):
        e = t.external_data.add()
        e.key, e.value = k, v
    onnx.save(m, str(path))


@pytest.mark.slow
def test_model_over_2gib_round_trips_with_external_data(tmp_path, capsys):
    src, out = tmp_path / "big.onnx", tmp_path / "big.opt.onnx"
    _big_model(src)
    assert main(["optimize", str(src), "-o", str(out), "-q"]) == 0, capsys.readouterr().err
    assert (tmp_path / "big.opt.onnx.data").stat().st_size > 2**31
    assert out.stat().st_size < 1_000_000  # the weights are not inside the protobuf
    onnx.checker.check_model(str(out))
    feeds = {"ids": np.array([0, 5, ROWS - 1], np.int64)}
    got = run(str(out), feeds)
    assert got["y"][1, 0] == 5.0 and np.all(got["y"][2] == 7.0)
    assert not compare(run(str(src), feeds), got)


@pytest.mark.no_egglog
def test_external_data_is_kept_when_asked_and_written_atomically(tmp_path, monkeypatch):
    # The same code path at a small size: weights to OUT.data, nothing else left behind.
    m = _add_model(np.arange(4096, dtype=np.float32))
    monkeypatch.setattr("eqsat.io.modelio.EXTERNAL_DATA_THRESHOLD", 1000)
    out = tmp_path / "o.onnx"
    save_model(m, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx", "o.onnx.data"]
    back = load_model(out)
    assert np.array_equal(numpy_helper.to_array(back.graph.initializer[0]), np.arange(4096, dtype=np.float32))


@pytest.mark.no_egglog
def test_a_staged_model_replaces_the_target_only_when_its_block_succeeds(tmp_path, monkeypatch):
    # staged() yields the written, checked file (with its data file beside it) before the
    # target exists; an error in the block leaves the old target and no temporary folder.
    from eqsat.io.modelio import staged

    m = _add_model(np.arange(4096, dtype=np.float32))
    monkeypatch.setattr("eqsat.io.modelio.EXTERNAL_DATA_THRESHOLD", 1000)
    out = tmp_path / "o.onnx"
    out.write_bytes(b"old")
    with pytest.raises(RuntimeError), staged(m, out) as written:
        assert written != out and written.exists() and (written.parent / "o.onnx.data").exists()
        feeds = {"x": np.ones(4096, np.float32)}
        assert run(str(written), feeds)["y"][3] == 4.0  # runnable from where it was written
        raise RuntimeError("verification failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx"] and out.read_bytes() == b"old"
    with staged(m, out):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx", "o.onnx.data"]
    assert run(str(out), feeds)["y"][4095] == 4096.0


@pytest.mark.no_egglog
def test_verification_runs_the_files_it_is_given(tmp_path):
    # The CLI verifies the file it wrote, not a model serialized once more: a file that
    # differs from the in-memory model is what verification sees.
    from eqsat.verification import verify

    orig = _add_model(np.zeros(4096, dtype=np.float32))
    other = tmp_path / "other.onnx"
    save_model(_add_model(np.ones(4096, dtype=np.float32)), other)
    assert verify(orig, orig).status == "passed"
    v = verify(orig, orig, files=(None, other))
    assert v.status == "failed" and "4096 of 4096 values differ" in v.detail
    assert verify(orig, orig, files=(other, str(other))).status == "passed"


@pytest.mark.no_egglog
def test_an_input_with_data_outside_its_folder_is_refused(tmp_path, capsys):
    # eqsat read "../w.bin" (a small tensor went into memory) and wrote its bytes into the
    # output; onnxruntime refuses such a file, and so does eqsat now, before reading a byte
    m = _add_model(np.arange(4096, dtype=np.float32))
    t = m.graph.initializer[0]
    (tmp_path / "w.bin").write_bytes(t.raw_data)
    onnx.external_data_helper.set_external_data(t, "../w.bin", offset=0, length=4096 * 4)
    t.ClearField("raw_data")
    (tmp_path / "m").mkdir()
    src, out = tmp_path / "m" / "m.onnx", tmp_path / "m" / "o.onnx"
    onnx.save(m, str(src))
    assert main(["optimize", str(src), "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err
    assert "tensor 'w': external data location '../w.bin' leads outside the model's folder" in err
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["m.onnx"]


def _add_model(w: np.ndarray) -> onnx.ModelProto:
    return helper.make_model(
        helper.make_graph(
            [helper.make_node("Add", ["x", "w"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096])],
            [numpy_helper.from_array(w, "w")],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
    )


def test_weights_the_input_kept_outside_stay_outside(tmp_path):
    """An input with its weights in a data file comes back with them in OUT.onnx.data (the
    README's promise), at the default threshold: the large initializer stays a reference on
    disk from load to save; the small tensor, a Constant's, is read in."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((512, 512)).astype(np.float32)  # 1 MiB: kept as a reference
    b = rng.standard_normal(512).astype(np.float32)  # 2 KiB, external too: read into memory at load
    m = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Constant", [], ["b"], value=numpy_helper.from_array(b, "b")),
             helper.make_node("Add", ["h", "b"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 512])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 512])],
            [numpy_helper.from_array(w, "w")],
        ),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    src, out = tmp_path / "ext.onnx", tmp_path / "ext.opt.onnx"
    onnx.save(m, str(src), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.onnx.data",
              size_threshold=1024, convert_attribute=True)
    assert onnx.load(str(src), load_external_data=False).graph.node[1].attribute[0].t.data_location == 1
    loaded = load_model(src).graph
    assert loaded.initializer[0].data_location == TensorProto.EXTERNAL and not loaded.initializer[0].raw_data
    b_in = loaded.node[1].attribute[0].t
    assert b_in.data_location == TensorProto.DEFAULT and len(b_in.raw_data) == b.nbytes

    # in a fresh process, as a user runs it (whether protobuf reuses a wrapper's id() varies)
    p = subprocess.run([sys.executable, "-m", "eqsat", "optimize", str(src), "-o", str(out), "-q"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "ext.opt.onnx.data").stat().st_size >= w.nbytes
    assert out.stat().st_size < 100_000  # the weight is not inside the protobuf
    onnx.checker.check_model(str(out))
    feeds = {"x": rng.standard_normal((2, 512)).astype(np.float32)}
    assert not compare(run(str(src), feeds), run(str(out), feeds))


@pytest.mark.no_egglog
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.INT8,
                                   TensorProto.INT64, TensorProto.BOOL, TensorProto.DOUBLE, TensorProto.UINT4,
                                   TensorProto.INT4, TensorProto.FLOAT4E2M1, TensorProto.FLOAT8E4M3FN,
                                   TensorProto.FLOAT8E8M0, TensorProto.INT2, TensorProto.UINT2,
                                   TensorProto.FLOAT6E2M3, TensorProto.FLOAT6E3M2, TensorProto.UINT8])
@pytest.mark.parametrize("shape", [(3, 5), (7,), (), (0, 4)])
def test_content_bytes_is_the_raw_data_length_without_reading_it(dtype, shape):
    from eqsat.io.external import content_bytes

    vals = np.ones(shape, dtype=np.float32)
    t = helper.make_tensor("t", dtype, shape, vals.flatten().tolist(), raw=False)
    raw = numpy_helper.from_array(numpy_helper.to_array(t), "t")  # the same tensor as raw_data
    assert raw.HasField("raw_data")
    assert content_bytes(raw) == len(raw.raw_data)
