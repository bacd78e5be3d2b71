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
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # eqsat from this checkout


def _producers(g) -> dict:
    return {o: n for n in g.node for o in n.output}


def _consumers(g) -> dict:
    out: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def _used(g) -> set[str]:
    """Every name a node of `g` or of its subgraphs reads, and the graph's outputs."""
    names = {o.name for o in g.output}
    for n in g.node:
        names.update(n.input)
        for at in n.attribute:
            for sub in [at.g, *at.graphs] if at.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) else []:
                names |= _used(sub)
    return names


def _replace(g, new: dict[int, list], drop: set[int], dead: set[str]) -> None:
    """Nodes: id -> its replacement (a list), ids in `drop` removed; then the initializers
    named in `dead` (the rewritten weights and biases) that nothing reads any more."""
    nodes = []
    for n in g.node:
        if id(n) in new:
            nodes += new[id(n)]
        elif id(n) not in drop:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    gone = dead - _used(g)
    keep = [t for t in g.initializer if t.name not in gone]
    del g.initializer[:]
    g.initializer.extend(keep)


def _bias_of(add, product_out: str, consts: dict, n: int | None = None):
    """The Add's other operand when it is a 1-D constant (of `n` elements, when given)."""
    other = add.input[1] if add.input[0] == product_out else add.input[0]
    if other not in consts or consts[other].ndim != 1 or (n is not None and consts[other].shape != (n,)):
        return None
    return other


def _ranks(model: onnx.ModelProto, names: list[str]) -> dict[str, int]:
    """Ranks of the values `names`, read from one onnxruntime run of the model with them as
    extra outputs (static inference loses shapes after eqsat's com.microsoft ops), on random
    inputs at the first sizes of eqsat's verification that run."""
    from eqsat.verification import random_inputs, session, verification_dims

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in known)
    sess = session(probe)
    wanted = [o.name for o in sess.get_outputs() if o.name in names]
    for dims in verification_dims(model):
        try:
            values = sess.run(wanted, random_inputs(model, dims))
        except Exception:  # noqa: BLE001 - sizes this model cannot run: try the next
            continue
        return {n: v.ndim for n, v in zip(wanted, values, strict=True)}
    return {}


def split_merged(model: onnx.ModelProto) -> tuple[int, int]:
    """Split(Add(MatMul(x, W), b), sizes, axis=last) -> Add(MatMul(x, W[:, part]), b[part]) per
    part. Returns (rewritten, skipped): a Split of such a product whose axis cannot be told to
    be the last one (the model did not run, so its rank is unknown) is skipped."""
    g = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    prod, cons = _producers(g), _consumers(g)
    ranks = _ranks(model, [n.input[0] for n in g.node if n.op_type == "Split"])
    new, drop, dead, skipped = {}, set(), set(), 0
    for n in g.node:
        if n.op_type != "Split" or len(n.input) < 2 or n.input[1] not in consts:
            continue
        add = prod.get(n.input[0])
        if add is None or add.op_type != "Add":
            continue
        mm = next((prod[i] for i in add.input if i in prod and prod[i].op_type == "MatMul"), None)
        if mm is None or mm.input[1] not in consts or consts[mm.input[1]].ndim != 2:
            continue
        w = consts[mm.input[1]]
        bias = _bias_of(add, mm.output[0], consts, w.shape[1])
        if bias is None or len(cons[add.output[0]]) != 1 or len(cons[mm.output[0]]) != 1:
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
        rank = ranks.get(n.input[0])
        if axis != -1 and (rank is None or axis != rank - 1):
            skipped += rank is None
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
        dead |= {mm.input[1], bias}
    _replace(g, new, drop, dead)
    return len(new), skipped


def matmul_add_to_gemm(model: onnx.ModelProto) -> tuple[int, int]:
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
        k, m = consts[n.input[1]].shape
        bias = _bias_of(add, n.output[0], consts, m)
        if bias is None:
            continue
        p = f"{n.output[0]}.gemm"
        g.initializer.extend([numpy_helper.from_array(np.array([-1, k], np.int64), f"{p}.flat"),
                              numpy_helper.from_array(np.array([m], np.int64), f"{p}.n")])
        new[id(n)] = [helper.make_node("Shape", [n.input[0]], [f"{p}.lead"], end=-1),
                      helper.make_node("Concat", [f"{p}.lead", f"{p}.n"], [f"{p}.shape"], axis=0),
                      helper.make_node("Reshape", [n.input[0], f"{p}.flat"], [f"{p}.x"]),
                      helper.make_node("Gemm", [f"{p}.x", n.input[1], bias], [f"{p}.y"]),
                      helper.make_node("Reshape", [f"{p}.y", f"{p}.shape"], [add.output[0]])]
        drop.add(id(add))
    _replace(g, new, drop, set())
    return len(new), 0


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
    n, skipped = VARIANTS[a.variant](model)
    if skipped:
        print(f"warning: {skipped} candidate(s) skipped: their rank is unknown (the model did not run on "
              "random inputs)", file=sys.stderr)
    if not n:
        raise SystemExit(f"nothing to rewrite for --variant {a.variant} in {a.src}")
    onnx.checker.check_model(model)
    onnx.save(model, a.dst)
    print(f"{a.dst}: {n} rewritten ({a.variant})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
