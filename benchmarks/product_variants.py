"""Hand-made variants of a model's matrix products, to measure forms eqsat does not choose.

    python benchmarks/product_variants.py IN.onnx OUT.onnx --variant split|gemm

- `split`: every Split of Add(MatMul(x, W), b) along the last axis, W and b constants (GPT-2's
  merged query/key/value product), becomes one MatMul + Add per part, on slices of W and b:
  the parallel products the CPU profile prefers to a merged one (merge_parallel_matmuls).
- `gemm`: every Add(MatMul(x, W), b) with a 2-D constant W, a 1-D constant b and a MatMul read
  by that Add alone becomes Reshape(x, [-1, K]) -> Gemm(W, b) -> Reshape back to x's leading
  dims and N: the bias inside the product, GPT-2's exported form.

The result is checked (onnx.checker) and computes the same function. Measure it against the
input with benchmarks/ab.py, e.g. for eqsat's GPT-2:

    eqsat optimize benchmarks/models/gpt2.onnx -o eq.onnx
    python benchmarks/product_variants.py eq.onnx split.onnx --variant split
    python benchmarks/ab.py benchmarks/models/gpt2.onnx eq=eq.onnx split=split.onnx --setting all
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _producers(g) -> dict:
    return {o: n for n in g.node for o in n.output}


def _consumers(g) -> dict:
    out: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def _replace(g, new: dict[int, list], drop: set[int]) -> None:
    nodes = []
    for n in g.node:
        if id(n) in new:
            nodes += new[id(n)]
        elif id(n) not in drop:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)


def _bias_of(add, product_out: str, consts: dict):
    other = add.input[1] if add.input[0] == product_out else add.input[0]
    return other if other in consts and consts[other].ndim == 1 else None


def split_merged(model: onnx.ModelProto) -> int:
    """Split(Add(MatMul(x, W), b), sizes, axis=-1) -> Add(MatMul(x, W[:, part]), b[part]) per part."""
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    prod, cons = _producers(g), _consumers(g)
    inferred = onnx.shape_inference.infer_shapes(model).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in [*inferred.value_info, *inferred.input]
             if v.type.tensor_type.HasField("shape")}
    new, drop = {}, set()
    for n in g.node:
        if n.op_type != "Split" or len(n.input) < 2 or n.input[1] not in consts:
            continue
        add = prod.get(n.input[0])
        mm = prod.get(add.input[0]) if add is not None and add.op_type == "Add" else None
        if mm is None or mm.op_type != "MatMul" or mm.input[1] not in consts or consts[mm.input[1]].ndim != 2:
            continue
        bias = _bias_of(add, mm.output[0], consts)
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
        w = consts[mm.input[1]]
        if bias is None or len(cons[add.output[0]]) != 1 or len(cons[mm.output[0]]) != 1:
            continue
        if axis != -1 and axis != ranks.get(n.input[0], 0) - 1:
            continue
        parts, off = [], 0
        for k, (size, out) in enumerate(zip(consts[n.input[1]].tolist(), n.output, strict=True)):
            wn, bn = f"{mm.input[1]}.part{k}", f"{bias}.part{k}"
            g.initializer.extend([numpy_helper.from_array(np.ascontiguousarray(w[:, off:off + size]), wn),
                                  numpy_helper.from_array(consts[bias][off:off + size].copy(), bn)])
            parts += [helper.make_node("MatMul", [mm.input[0], wn], [f"{out}.product"]),
                      helper.make_node("Add", [f"{out}.product", bn], [out])]
            off += size
        new[id(n)] = parts
        drop |= {id(add), id(mm)}
    _replace(g, new, drop)
    return len(new)


def matmul_add_to_gemm(model: onnx.ModelProto) -> int:
    """Add(MatMul(x, W), b) -> Reshape(Gemm(Reshape(x, [-1, K]), W, b), Shape(x)[:-1] ++ [N])."""
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    cons = _consumers(g)
    outputs = {o.name for o in g.output}
    new, drop = {}, set()
    for n in g.node:
        if n.op_type != "MatMul" or n.input[1] not in consts or consts[n.input[1]].ndim != 2:
            continue
        users = cons.get(n.output[0], [])
        if len(users) != 1 or users[0].op_type != "Add" or n.output[0] in outputs:
            continue
        add = users[0]
        bias = _bias_of(add, n.output[0], consts)
        if bias is None:
            continue
        k, m = consts[n.input[1]].shape
        p = f"{n.output[0]}.gemm"
        g.initializer.extend([numpy_helper.from_array(np.array([-1, k], np.int64), f"{p}.flat"),
                              numpy_helper.from_array(np.array([m], np.int64), f"{p}.n")])
        new[id(n)] = [helper.make_node("Shape", [n.input[0]], [f"{p}.lead"], end=-1),
                      helper.make_node("Concat", [f"{p}.lead", f"{p}.n"], [f"{p}.shape"], axis=0),
                      helper.make_node("Reshape", [n.input[0], f"{p}.flat"], [f"{p}.x"]),
                      helper.make_node("Gemm", [f"{p}.x", n.input[1], bias], [f"{p}.y"]),
                      helper.make_node("Reshape", [f"{p}.y", f"{p}.shape"], [add.output[0]])]
        drop.add(id(add))
    _replace(g, new, drop)
    return len(new)


VARIANTS = {"split": split_merged, "gemm": matmul_add_to_gemm}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--variant", choices=sorted(VARIANTS), required=True)
    a = ap.parse_args(argv)
    model = onnx.load(a.src)
    if a.variant == "gemm" and not any(o.domain in ("", "ai.onnx") and o.version >= 15 for o in model.opset_import):
        raise SystemExit("the gemm variant needs opset 15 or later (Shape with end)")
    n = VARIANTS[a.variant](model)
    if not n:
        raise SystemExit(f"nothing to rewrite for --variant {a.variant} in {a.src}")
    onnx.checker.check_model(model)
    onnx.save(model, a.dst)
    print(f"{a.dst}: {n} rewritten ({a.variant})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
