"""The same model and flags give the same program in every process, whatever Python's hash
seed (PYTHONHASHSEED): a deployment diffs its artifacts, and a bug report must reproduce.

Once, ResNet-50 came out of `eqsat optimize` as two programs under PYTHONHASHSEED=1 and 2: in
two downsampling blocks the residual Add + Relu was fused into the main branch's 1x1 Conv in
one and into the shortcut's in the other, at the same cost. The ILP (extract/ilp.py) wrote its
rows for the value classes (integers, vectors, attributes) in the order of a set of e-class
names, so HiGHS saw the rows in another order in each process and broke the tie otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from .conftest import assert_same_outputs

SEEDS = ("1", "2", "3")

# In a child process: the ILP's program (nodes, objective, rows in order, row bounds, cuts) at
# each solve, as one digest per solve, for the e-graph file argv[1].
PROGRAM_DIGESTS = """
import hashlib, json, sys
import eqsat.extract.ilp as ilp
from eqsat.extract.costs import make_cost_model
from eqsat.extract.egraph import EGraph

solve = ilp._Program.solve

def recorded(self, cuts, time_limit, integral=True):
    rows = sorted(zip(self.rows, self.cols, self.vals))
    text = json.dumps([self.nodes, self.c_vec.tolist(), rows, self.lo, self.hi, cuts, integral], default=str)
    print(hashlib.sha256(text.encode()).hexdigest())
    return solve(self, cuts, time_limit, integral)

ilp._Program.solve = recorded
ilp.ILP().extract(EGraph.from_json(sys.argv[1]), make_cost_model("roofline"))
"""


def residual_block(c: int = 32, mid: int = 16, out: int = 64, hw: int = 8) -> onnx.ModelProto:
    """A ResNet downsampling bottleneck: x -> 1x1 Conv -> Relu -> 3x3 Conv (stride 2) -> Relu ->
    1x1 Conv, plus the shortcut x -> 1x1 Conv (stride 2), then Add and Relu; channels multiples
    of 8, so the NCHWc layout applies."""
    rng = np.random.default_rng(0)

    def w(name, shape):
        return numpy_helper.from_array((0.1 * rng.standard_normal(shape)).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["a1"]), helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["a2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["a2"], ["r2"]), helper.make_node("Conv", ["r2", "w3"], ["a3"]),
             helper.make_node("Conv", ["x", "ws"], ["s"], strides=[2, 2]),
             helper.make_node("Add", ["a3", "s"], ["sum"]), helper.make_node("Relu", ["sum"], ["y"])]
    inits = [w("w1", [mid, c, 1, 1]), w("w2", [mid, mid, 3, 3]), w("w3", [out, mid, 1, 1]), w("ws", [out, c, 1, 1])]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", T.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, out, hw // 2, hw // 2])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def run_seeded(seed: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, *args], env=env, cwd=root, capture_output=True, text=True, timeout=300)


def optimize_seeded(seed: str, model: Path, out: Path, *extra: str) -> None:
    done = run_seeded(seed, "-m", "eqsat", "optimize", str(model), "-o", str(out), "--no-verify", "-q", *extra)
    assert done.returncode == 0, done.stderr


def test_ilp_program_is_the_same_under_every_hash_seed(tmp_path):
    # before the fix: the rows of the value classes came in set order, another in each
    # process (three digests for three seeds), and HiGHS broke cost ties by that order
    model = tmp_path / "block.onnx"
    onnx.save(residual_block(), model)
    egraph = tmp_path / "egraph.json"
    optimize_seeded("0", model, tmp_path / "out.onnx", "--save-egraph", str(egraph))
    digests = []
    for seed in SEEDS:
        done = run_seeded(seed, "-c", PROGRAM_DIGESTS, str(egraph))
        assert done.returncode == 0, done.stderr
        digests.append(done.stdout.split())
    assert digests[0], "the ILP solved nothing"
    assert all(d == digests[0] for d in digests), f"programs per seed: {digests}"


def test_optimize_writes_the_same_bytes_under_every_hash_seed(tmp_path):
    original = residual_block()
    model = tmp_path / "block.onnx"
    onnx.save(original, model)
    outs = []
    for seed in SEEDS:
        out = tmp_path / f"seed{seed}.onnx"
        optimize_seeded(seed, model, out)
        outs.append(out.read_bytes())
    assert all(o == outs[0] for o in outs), "the written models differ between hash seeds"
    written = onnx.load_from_string(outs[0])
    onnx.checker.check_model(written)
    assert "Conv" in [n.op_type for n in written.graph.node]
    assert_same_outputs(original, written, rtol=1e-4, atol=1e-5)
