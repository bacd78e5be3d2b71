"""Measure a hardware profile for the roofline cost model on this machine, with onnxruntime
(CPU, one thread unless told otherwise):

- matmul_gflops: a 512 x 512 x 512 float32 MatMul;
- vector_gflops: an element-wise Mul of two 64 Ki-element vectors that stay in cache;
- mem_gbps: an element-wise Add of two 16 Mi-element vectors (192 MiB moved);
- kernel_overhead_us: a chain of 200 Adds on one-element tensors, per op.

Each figure is the median of several timed runs after warm-up.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time

import numpy as np
from onnx import TensorProto, helper

from .verify import session


def _timed(model, feeds: dict, runs: int, threads: int) -> float:
    sess = session(model, threads=threads)
    for _ in range(3):
        sess.run(None, feeds)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _model(nodes, inputs, outputs):
    g = helper.make_graph(nodes, "calibrate", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def measure(threads: int = 1, runs: int = 15) -> dict:
    rng = np.random.default_rng(0)
    n = 512
    mm = _model([helper.make_node("MatMul", ["a", "b"], ["c"])], [_vi("a", [n, n]), _vi("b", [n, n])], [_vi("c", [n, n])])
    t = _timed(mm, {"a": rng.random((n, n), np.float32), "b": rng.random((n, n), np.float32)}, runs, threads)
    matmul = 2 * n**3 / t / 1e9

    k = 64 * 1024
    vec = _model([helper.make_node("Mul", ["a", "b"], ["c"])], [_vi("a", [k]), _vi("b", [k])], [_vi("c", [k])])
    t = _timed(vec, {"a": rng.random(k, np.float32), "b": rng.random(k, np.float32)}, runs * 10, threads)
    vector = k / t / 1e9

    m = 16 * 1024 * 1024
    add = _model([helper.make_node("Add", ["a", "b"], ["c"])], [_vi("a", [m]), _vi("b", [m])], [_vi("c", [m])])
    t = _timed(add, {"a": rng.random(m, np.float32), "b": rng.random(m, np.float32)}, runs, threads)
    bandwidth = 3 * 4 * m / t / 1e9

    chain = 200
    nodes = [helper.make_node("Add", [f"x{i}", "one"], [f"x{i + 1}"]) for i in range(chain)]
    small = _model(nodes, [_vi("x0", [1]), _vi("one", [1])], [_vi(f"x{chain}", [1])])
    t = _timed(small, {"x0": np.zeros(1, np.float32), "one": np.ones(1, np.float32)}, runs * 4, threads)
    overhead = t / chain * 1e6

    return {
        "name": "cpu",
        "matmul_gflops": round(matmul, 2),
        "vector_gflops": round(vector, 3),
        "mem_gbps": round(bandwidth, 2),
        "kernel_overhead_us": round(overhead, 3),
        "transcendental_flops": 10.0,
        "source": f"measured by `eqsat calibrate` on {platform.processor() or platform.machine()} "
                  f"({os.cpu_count()} cores), onnxruntime CPU, {threads} thread(s), median of {runs}+ runs",
    }


def write(path, threads: int = 1) -> dict:
    prof = measure(threads)
    with open(path, "w") as f:
        json.dump(prof, f, indent=2)
        f.write("\n")
    return prof
