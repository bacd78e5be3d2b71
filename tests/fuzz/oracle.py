"""The fuzzer's own judge: runs models under onnxruntime and compares outputs, independent of
eqsat's verification (which is itself under test).

Both models run with onnxruntime's graph optimizations off, each as written. Floats match
within rtol 1e-3, atol 1e-4 (eqsat's float32 tolerance), NaN matching NaN, and an infinity
matching a finite value of its sign within a factor of 16 of the type's largest (a rewrite
that reorders arithmetic, such as folding a BatchNormalization into a Conv's weights, moves
where a sum of values near the largest float overflows, as onnxruntime's own fusions do);
integers and booleans exactly; names, order, dtypes and shapes exactly.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
import onnxruntime as ort

RTOL, ATOL = 1e-3, 1e-4


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = session(model)
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(names, feeds), strict=True))


def run_all(model: onnx.ModelProto, feeds_list: list[dict]) -> list[dict[str, np.ndarray]]:
    s = session(model)
    names = [o.name for o in s.get_outputs()]
    return [dict(zip(names, s.run(names, f), strict=True)) for f in feeds_list]


def _overflow_band(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Where x is an infinity and y a finite value of its sign within 16x of the largest."""
    band = np.finfo(x.dtype).max / 16
    with np.errstate(invalid="ignore"):
        return np.isinf(x) & np.isfinite(y) & (np.sign(x) == np.sign(y)) & (np.abs(y) >= band)


def compare(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray]) -> list[str]:
    """What differs, one line per output (empty when equal)."""
    if list(expected) != list(actual):
        return [f"outputs {list(actual)}, expected {list(expected)}"]
    out = []
    for name, e in expected.items():
        a = actual[name]
        e, a = np.asarray(e), np.asarray(a)
        if e.dtype != a.dtype or e.shape != a.shape:
            out.append(f"{name}: {a.dtype}{list(a.shape)}, expected {e.dtype}{list(e.shape)}")
            continue
        if e.dtype.kind == "f":
            ok = np.isclose(a, e, rtol=RTOL, atol=ATOL, equal_nan=True) | _overflow_band(e, a) | _overflow_band(a, e)
        else:
            ok = a == e
        if not np.all(ok):
            idx = tuple(int(i) for i in np.argwhere(~ok)[0])
            out.append(f"{name}: {int((~ok).sum())} of {e.size} values differ, first at {idx}: "
                       f"{a[idx]!r}, expected {e[idx]!r}")
    return out


def with_functions(model: onnx.ModelProto, functions: list[onnx.FunctionProto]) -> onnx.ModelProto:
    """A copy of `model` with these model-local functions added (those it lacks, by domain
    and name), so that onnxruntime can run the custom ops they define."""
    m = copy.deepcopy(model)
    have = {(f.domain, f.name) for f in m.functions}
    m.functions.extend(f for f in functions if (f.domain, f.name) not in have)
    domains = {o.domain for o in m.opset_import}
    for f in functions:
        if f.domain not in domains:
            m.opset_import.append(onnx.helper.make_opsetid(f.domain, 1))
            domains.add(f.domain)
    m.ir_version = max(m.ir_version, 8)
    return m
