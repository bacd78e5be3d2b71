"""The example behind `make demo`: a small model with the patterns the default rules
target, and a summary of what `eqsat optimize` did to it.

    python -m eqsat.demo build out/demo/model.onnx
    python -m eqsat.demo summary out/demo/model.onnx out/demo/model.opt.onnx out/demo/report.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build_model(seed: int = 0) -> onnx.ModelProto:
    """A CNN stem (Conv, BatchNormalization, Relu, a residual Add) and an MLP head with the
    Identity and Dropout nodes that exporters leave behind; batch size is symbolic."""
    rng = np.random.default_rng(seed)

    def init(name: str, *shape: int, positive: bool = False) -> TensorProto:
        a = rng.random(shape) + 0.5 if positive else rng.standard_normal(shape) * 0.2
        return numpy_helper.from_array(a.astype(np.float32), name)

    c = 16  # a multiple of both NCHWc blocks (8 with AVX2, 16 with AVX-512): the blocked layout is offered everywhere
    inits = [
        init("conv1.w", c, 3, 3, 3), init("conv1.b", c),
        init("bn1.scale", c, positive=True), init("bn1.bias", c), init("bn1.mean", c),
        init("bn1.var", c, positive=True),
        init("conv2.w", c, c, 3, 3), init("conv2.b", c),
        init("fc1.w", c, 32), init("fc1.b", 32), init("fc2.w", 32, 10), init("fc2.b", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"], ["b1"],
                         name="bn1"),
        helper.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Add", ["c2", "r1"], ["res"], name="residual"),
        helper.make_node("Relu", ["res"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="pool"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Identity", ["flat"], ["flat_id"], name="identity"),
        helper.make_node("MatMul", ["flat_id", "fc1.w"], ["h"], name="fc1"),
        helper.make_node("Add", ["h", "fc1.b"], ["hb"], name="fc1_bias"),
        helper.make_node("Relu", ["hb"], ["hr"], name="relu3"),
        helper.make_node("Dropout", ["hr"], ["hd"], name="dropout"),
        helper.make_node("MatMul", ["hd", "fc2.w"], ["o"], name="fc2"),
        helper.make_node("Add", ["o", "fc2.b"], ["logits"], name="fc2_bias"),
    ]
    graph = helper.make_graph(
        nodes, "eqsat-demo",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="eqsat-demo")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def summary(before: Path, after: Path, report: Path) -> str:
    from eqsat.verification import compare, random_inputs, run

    r = json.loads(Path(report).read_text())
    m0, m1 = onnx.load(str(before)), onnx.load(str(after))
    feeds = random_inputs(m0, {"batch": 4})
    diffs = compare(run(m0, feeds), run(m1, feeds), rtol=1e-4, atol=1e-5)
    sat = r["saturation"]
    lines = [
        f"eqsat demo: {before} -> {after}",
        f"  nodes: {r['nodes_before']} -> {r['nodes_after']}",
        f"  ops before: {_hist(r['ops_before'])}",
        f"  ops after:  {_hist(r['ops_after'])}",
        f"  saturation: {sat['stop_reason']} after {sat['iterations']} rounds, {sat['enodes']} e-nodes",
        *_fired(sat),
        f"  time: {sum(r['times_s'].values()):.2f} s ({', '.join(f'{k} {v:.3f}' for k, v in r['times_s'].items())})",
        "  outputs vs original under onnxruntime (batch 4): "
        + ("equal within rtol 1e-4, atol 1e-5" if not diffs else "MISMATCH " + "; ".join(map(str, diffs))),
    ]
    return "\n".join(lines)


def _fired(sat: dict) -> list[str]:
    """The rules that fired: first the rewrites, which add the forms extraction chooses from,
    then the analysis rules (shapes, dtypes, pattern facts), apart and in brief. A report
    without the split (an older eqsat's) shows them all as one list."""
    if "rewrite_matches" not in sat:
        return [f"  rules fired: {_hist(sat['rule_matches']) or 'none'}"]
    an = sat["analysis_matches"]
    return [f"  rewrites fired: {_hist(sat['rewrite_matches']) or 'none'}",
            f"  analysis rules fired: {len(an)} rules, {sum(an.values())} matches (facts only: shapes, "
            "dtypes, patterns; the report's analysis_matches)"]


def _hist(h: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in h.items())


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "build":
        out = Path(argv[1])
        out.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(build_model(), str(out))
        print(f"wrote {out}")
        return 0
    if len(argv) == 4 and argv[0] == "summary":
        print(summary(Path(argv[1]), Path(argv[2]), Path(argv[3])))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
