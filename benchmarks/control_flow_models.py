#!/usr/bin/env python
"""eqsat on models with control flow, data-dependent shapes and post-processing, never used before.

    python benchmarks/control_flow_models.py [--only NAME,...] [--out DIR] [--results FILE]
                                             [--timeout S] [--dynamo] [--refused] [--table-only]

Each model of MODELS is built here with random weights after ``torch.manual_seed(0)``
(``weights=None, weights_backbone=None``: nothing is downloaded) or written with onnx.helper,
exported with the TorchScript exporter (opset 17, symbolic image height and width where the
model takes any size) to ``DIR/NAME.onnx`` (``--dynamo``: the torch.export exporter, opset 18,
``DIR/NAME.dynamo.onnx``), then optimized in a child process with eqsat's defaults:

    python -m eqsat optimize M.onnx -o M.opt.onnx --report M.json

and the written model is compared with the original under onnxruntime (graph optimizations
off) on inputs chosen here, not by eqsat's verification (`check`): several image sizes, images
scaled so that scores cross the thresholds (detections and none), both branches of every If,
zero, one and many Loop trips. Outputs must have the same shapes; the difference is the largest
|difference| / max(1, max |original|) of any output, and where the rows of a detection output
come in another order, of the rows sorted. Writes FILE (default
benchmarks/results/control-flow-models.md) and the records as DIR/results.json, where the
records of earlier runs into DIR are kept (runs with --only add rows). `--refused`: for the
selected models that eqsat refused (exit 1), its program written with --no-verify is
checked the same way, beside the original under onnxruntime's own graph optimizations (how
far rounding alone moves those outputs). `--table-only` writes FILE from DIR/results.json.

torchvision's C++ operators do not load beside this project's CPU torch
(benchmarks/torchvision_ops.py); `declare_ops` declares nms and roi_align with Python
kernels, so the exporter meets them and writes NonMaxSuppression and RoiAlign as a working
torchvision would.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
_LIB: list = []  # keeps the operator declarations alive


def _nms(boxes: torch.Tensor, scores: torch.Tensor, threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression (torchvision::nms's contract): kept indices by score."""
    order = torch.argsort(scores, descending=True, stable=True)
    b = boxes[order]
    x1, y1, x2, y2 = b.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    keep, gone = [], torch.zeros(len(order), dtype=torch.bool)
    for i in range(len(order)):
        if gone[i]:
            continue
        keep.append(int(order[i]))
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        gone |= w * h / (area[i] + area - w * h) > threshold
    return torch.tensor(keep, dtype=torch.int64)


def _roi_align(inp, rois, scale, ph, pw, sampling, aligned):
    from torchvision.ops.roi_align import _roi_align as python_roi_align

    # the function itself, not torch.compile's wrapper (which a TorchScript trace refuses)
    return python_roi_align.__wrapped__(inp, rois, scale, ph, pw, sampling, aligned)


def _yes() -> bool:
    return True


def _nothing() -> None:
    pass


def declare_ops() -> None:
    """Declare torchvision::nms/qnms/roi_align/roi_pool with Python CPU kernels for nms and
    roi_align, import torchvision and make its ops modules call them (idempotent)."""
    if _LIB:
        return
    lib = torch.library.Library("torchvision", "DEF")
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
               "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")
    lib.define("roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
               "SymInt pooled_width) -> (Tensor, Tensor)")
    lib.impl("nms", _nms, "CPU")
    lib.impl("roi_align", _roi_align, "CPU")
    _LIB.append(lib)
    import torchvision.ops  # noqa: F401  (imports the modules patched below)

    # (torchvision.ops.roi_align is the function: the modules come from sys.modules)
    for name in ("torchvision.extension", "torchvision.ops.boxes", "torchvision.ops.roi_align"):
        m = sys.modules[name]
        m._has_ops = _yes
        m._assert_has_ops = _nothing


def _perturb_heads(net: torch.nn.Module) -> None:
    """Give every convolution or linear layer initialized near zero (detection heads: std 0.01,
    bias 0 or a fixed prior) He-scaled random weights and biases, so scores depend on the image."""
    g = torch.Generator().manual_seed(0)
    for mod in net.modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.ConvTranspose2d)) and mod.weight.std() < 0.02:
            mod.weight.data = torch.randn(mod.weight.shape, generator=g) * (2.0 / mod.weight[0].numel()) ** 0.5
            if mod.bias is not None:
                mod.bias.data = torch.randn(mod.bias.shape, generator=g) * 0.1


def _image(h: int, w: int, scale: float, seed: int = 1) -> np.ndarray:
    return (np.random.default_rng(seed).random((1, 3, h, w), dtype=np.float32) * scale).astype(np.float32)


DET_FEEDS = [(h, w, s) for h, w in ((320, 320), (256, 384)) for s in (0.0, 1.0, 3.0)]


class _Detection(torch.nn.Module):
    """A torchvision detector on one image [1, 3, H, W]: its first result's fields as outputs."""

    def __init__(self, net, keys):
        super().__init__()
        self.net, self.keys = net, keys

    def forward(self, x):
        out = self.net([x[0]])[0]
        return tuple(out[k] for k in self.keys)


def _threshold_owner(net):
    return net.roi_heads if hasattr(net, "roi_heads") else net


def detection(name: str, keys=("boxes", "scores", "labels"), perturb: bool = True, **kw):
    """A builder of torchvision.models.detection's `name` (small images: min/max size 320).
    With `perturb`, its heads get random weights (`_perturb_heads`) and its score threshold is
    set between the best scores of DET_FEEDS' images, so that some give detections and some
    none where the scores allow; without, it keeps torchvision's initialization and threshold
    (RetinaNet's then give none, a few and many detections at the three scales, where perturbed
    heads saturate every score at 1.0)."""

    def build():
        declare_ops()
        import torchvision.models.detection as det

        torch.manual_seed(0)
        args = {"weights": None, "weights_backbone": None, **kw}
        if not name.startswith("ssd"):
            args.update(min_size=320, max_size=320)
        net = getattr(det, name)(**args).eval()
        if not perturb:
            return _Detection(net, keys), (torch.from_numpy(_image(320, 320, 1.0)),)
        _perturb_heads(net)
        owner = _threshold_owner(net)
        owner.score_thresh = 0.0
        best = []
        with torch.no_grad():
            for h, w, s in DET_FEEDS[:3]:
                sc = net([torch.from_numpy(_image(h, w, s)[0])])[0]["scores"]
                best.append(float(sc.max()) if len(sc) else 0.0)
        best = sorted(set(best))
        owner.score_thresh = (best[0] + best[1]) / 2 if len(best) > 1 else 0.0
        return _Detection(net, keys), (torch.from_numpy(_image(320, 320, 1.0)),)

    return {"build": build, "inputs": ["x"], "outputs": list(keys), "axes": {"x": {2: "h", 3: "w"}},
            "feeds": lambda: [(f"{h}x{w}*{s}", {"x": _image(h, w, s)}) for h, w, s in DET_FEEDS],
            "rows": True}


class _Out(torch.nn.Module):
    def __init__(self, net, key=None):
        super().__init__()
        self.net, self.key = net, key

    def forward(self, *xs):
        y = self.net(*xs)
        if isinstance(y, dict):
            return y[self.key]
        return y[-1] if isinstance(y, list) else y


def segmentation(name: str):
    def build():
        declare_ops()
        import torchvision.models.segmentation as seg

        torch.manual_seed(0)
        net = getattr(seg, name)(weights=None, weights_backbone=None).eval()
        return _Out(net, "out"), (torch.from_numpy(_image(320, 320, 1.0)),)

    sizes = ((320, 320), (224, 288), (97, 131), (33, 47))
    return {"build": build, "inputs": ["x"], "outputs": ["y"], "axes": {"x": {2: "h", 3: "w"}, "y": {2: "h", 3: "w"}},
            "feeds": lambda: [(f"{h}x{w}*{s}", {"x": _image(h, w, s)}) for h, w in sizes for s in (1.0, 5.0)]}


def video(name: str):
    def build():
        declare_ops()
        import torchvision.models.video as vid

        torch.manual_seed(0)
        net = getattr(vid, name)(weights=None).eval()
        return net, (torch.randn(1, 3, 8, 112, 112),)

    def feeds():
        rng = np.random.default_rng(2)
        return [(f"{t}x{h}x{w}", {"x": rng.standard_normal((1, 3, t, h, w)).astype(np.float32)})
                for t, h, w in ((8, 112, 112), (4, 64, 96), (1, 32, 32), (16, 112, 112))]

    return {"build": build, "inputs": ["x"], "outputs": ["y"], "axes": {"x": {2: "t", 3: "h", 4: "w"}},
            "feeds": feeds}


def raft():
    def build():
        declare_ops()
        import torchvision.models.optical_flow as of

        torch.manual_seed(0)
        net = of.raft_small(weights=None).eval()

        class Flow(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, a, b):
                return self.net(a, b, num_flow_updates=3)[-1]

        return Flow(), (torch.rand(1, 3, 128, 128), torch.rand(1, 3, 128, 128))

    def feeds():
        rng = np.random.default_rng(3)
        out = []
        for h, w in ((128, 128), (128, 192), (64, 64)):
            a = rng.random((1, 3, h, w), dtype=np.float32)
            out.append((f"{h}x{w}", {"a": a, "b": np.roll(a, 3, axis=3)}))
        return out

    return {"build": build, "inputs": ["a", "b"], "outputs": ["flow"],
            "axes": {"a": {2: "h", 3: "w"}, "b": {2: "h", 3: "w"}}, "feeds": feeds}


class _Branchy(torch.nn.Module):
    """An `if` on the data and a `for` over a tensor size (torch.jit.script: If and Loop)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.lin(x)
        if bool(x.sum() > 0):
            y = torch.relu(y) * 2.0
        else:
            y = torch.sigmoid(y.transpose(0, 1)).transpose(0, 1) - 1.0
        acc = torch.zeros(y.size(1))
        for i in range(x.size(0)):
            acc = acc + y[i] * float(i) + 0.0
        return y, acc


class _Greedy(torch.nn.Module):
    """A generation-style loop (torch.jit.script): greedy tokens until the end token or `steps`,
    the output growing by one token a trip, so its length depends on the values."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.inp = torch.nn.Linear(8, 8)
        self.rec = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 16)

    def forward(self, h, start, steps):
        tok = start
        out = start.unsqueeze(0)
        n = int(steps)
        i = 0
        while i < n:
            h = torch.tanh(self.inp(self.emb(tok)) + self.rec(h))
            tok = torch.argmax(self.head(h), dim=-1)
            out = torch.cat([out, tok.unsqueeze(0)], 0)
            if bool((tok == 0).all()):
                break
            i += 1
        return out, h


def scripted(cls, inputs, outputs, axes, feeds):
    def build():
        torch.manual_seed(0)
        net = torch.jit.script(cls().eval())
        return net, tuple(torch.from_numpy(v) for v in feeds()[0][1].values())

    return {"build": build, "inputs": inputs, "outputs": outputs, "axes": axes, "feeds": feeds}


def _branchy_feeds():
    rng = np.random.default_rng(4)
    out = []
    for n in (5, 1, 0, 9):
        for sign in (1.0, -1.0):
            x = (np.abs(rng.standard_normal((n, 8))) * sign).astype(np.float32)
            out.append((f"n={n},{'+' if sign > 0 else '-'}", {"x": x}))
    return out


def _greedy_feeds():
    rng = np.random.default_rng(5)
    out = []
    for b, steps in ((2, 6), (1, 0), (1, 1), (3, 20)):
        for seed in range(2):
            h = (rng.standard_normal((b, 8)) * (1 + 3 * seed)).astype(np.float32)
            out.append((f"b={b},steps={steps},h*{1 + 3 * seed}",
                        {"h": h, "start": rng.integers(1, 16, (b,)).astype(np.int64),
                         "steps": np.array(steps, dtype=np.int64)}))
    return out


def _const(name: str, value, dtype=np.float32):
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(value, dtype=dtype)))


def _model(nodes, inputs, outputs, opset: int = 17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def onnx_if_loop() -> onnx.ModelProto:
    """An If whose branches give other shapes (x [n, 4] or [2n, 4]) and a Loop of trip count `m`
    whose condition depends on the values, with a carried value and a scan output."""
    then = helper.make_graph([
        helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]),
        _const("one", 1.0), helper.make_node("Mul", ["t2", "one"], ["t3"]),
        helper.make_node("Relu", ["t3"], ["then_out"])], "then", [], [_vi("then_out", TensorProto.FLOAT, ["a", 4])])
    other = helper.make_graph([
        helper.make_node("Concat", ["x", "x"], ["c"], axis=0),
        _const("zero", 0.0), helper.make_node("Add", ["c", "zero"], ["else_out"])],
        "else", [], [_vi("else_out", TensorProto.FLOAT, ["b", 4])])
    body = helper.make_graph([
        _const("two", 2.0), _const("nil", 0.0), _const("limit", 100.0),
        helper.make_node("Mul", ["v_in", "two"], ["v2"]),
        helper.make_node("Add", ["v2", "nil"], ["v_out"]),
        helper.make_node("ReduceMax", ["v_out"], ["mx"], keepdims=0),
        helper.make_node("Less", ["mx", "limit"], ["cond_out"]),
        helper.make_node("ReduceSum", ["v_out"], ["s_out"], keepdims=0)],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
                 _vi("v_in", TensorProto.FLOAT, ["n", 4])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("v_out", TensorProto.FLOAT, ["n", 4]),
         _vi("s_out", TensorProto.FLOAT, [])])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0), _const("z", 0.0),
        helper.make_node("Greater", ["sum", "z"], ["pos"]),
        helper.make_node("If", ["pos"], ["branch"], then_branch=then, else_branch=other),
        _const("yes", True, np.bool_),
        helper.make_node("Loop", ["m", "yes", "x"], ["looped", "sums"], body=body)]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, ["n", 4]), _vi("m", TensorProto.INT64, [])],
                  [_vi("branch", TensorProto.FLOAT, ["r", 4]), _vi("looped", TensorProto.FLOAT, ["n", 4]),
                   _vi("sums", TensorProto.FLOAT, ["trips"])])


def _if_loop_feeds():
    rng = np.random.default_rng(6)
    out = []
    for n, m, scale in ((3, 0, 1.0), (3, 1, 1.0), (5, 4, 1.0), (2, 50, 1.0), (4, 3, -1.0), (1, 5, -1.0), (0, 2, 1.0)):
        x = (np.abs(rng.standard_normal((n, 4))) * scale).astype(np.float32)
        out.append((f"n={n},m={m},{'+' if scale > 0 else '-'}", {"x": x, "m": np.array(m, dtype=np.int64)}))
    return out


def onnx_scan_sequence() -> onnx.ModelProto:
    """A Scan (running sum over the rows of x [T, 4]) and the sequence ops: SplitToSequence into
    pieces of 2 rows, SequenceLength, SequenceAt(-1), SequenceInsert, ConcatFromSequence."""
    body = helper.make_graph([
        helper.make_node("Add", ["s_in", "row"], ["s_out"]),
        _const("one", 1.0), helper.make_node("Mul", ["s_out", "one"], ["m1"]),
        helper.make_node("Relu", ["m1"], ["y_row"])],
        "scan", [_vi("s_in", TensorProto.FLOAT, [4]), _vi("row", TensorProto.FLOAT, [4])],
        [_vi("s_out", TensorProto.FLOAT, [4]), _vi("y_row", TensorProto.FLOAT, [4])])
    nodes = [
        helper.make_node("Scan", ["s0", "x"], ["s_final", "running"], body=body, num_scan_inputs=1),
        _const("two", 2, np.int64),
        helper.make_node("SplitToSequence", ["x", "two"], ["seq"], axis=0),
        helper.make_node("SequenceLength", ["seq"], ["count"]),
        _const("last", -1, np.int64),
        helper.make_node("SequenceAt", ["seq", "last"], ["tail"]),
        helper.make_node("Neg", ["tail"], ["neg_tail"]),
        helper.make_node("SequenceInsert", ["seq", "neg_tail"], ["seq2"]),
        helper.make_node("ConcatFromSequence", ["seq2"], ["joined"], axis=0),
        helper.make_node("Transpose", ["joined"], ["jt"], perm=[1, 0]),
        helper.make_node("Transpose", ["jt"], ["joined_back"], perm=[1, 0])]
    return _model(nodes, [_vi("s0", TensorProto.FLOAT, [4]), _vi("x", TensorProto.FLOAT, ["T", 4])],
                  [_vi("s_final", TensorProto.FLOAT, [4]), _vi("running", TensorProto.FLOAT, ["T", 4]),
                   _vi("count", TensorProto.INT64, []), _vi("joined_back", TensorProto.FLOAT, ["J", 4])])


def _scan_sequence_feeds():
    rng = np.random.default_rng(7)
    return [(f"T={t}", {"s0": rng.standard_normal(4).astype(np.float32),
                        "x": rng.standard_normal((t, 4)).astype(np.float32)}) for t in (1, 2, 5, 8)]


def onnx_data_dependent() -> onnx.ModelProto:
    """Output sizes that depend on the values of x [n]: TopK with k = the count of positives,
    NonZero then Gather, Compress, and NonMaxSuppression with a computed box count."""
    nodes = [
        _const("z", 0.0), helper.make_node("Greater", ["x", "z"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["posi"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["posi"], ["k"], keepdims=1),
        helper.make_node("TopK", ["x", "k"], ["top", "top_i"]),
        _const("half", 0.5), helper.make_node("Greater", ["x", "half"], ["big"]),
        helper.make_node("NonZero", ["big"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "nzt"], ["picked"]),
        helper.make_node("Compress", ["x", "pos"], ["kept"], axis=0),
        helper.make_node("Where", ["pos", "x", "z"], ["relu_like"]),
        helper.make_node("ReduceSum", ["top"], ["top_sum"], keepdims=1),
        helper.make_node("Mul", ["relu_like", "top_sum"], ["scaled"]),
        _const("iou", [0.3]), _const("score", [0.2]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "k", "iou", "score"], ["sel"])]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, ["n"]), _vi("boxes", TensorProto.FLOAT, [1, "b", 4]),
                          _vi("scores", TensorProto.FLOAT, [1, 1, "b"])],
                  [_vi("top", TensorProto.FLOAT, ["k"]), _vi("top_i", TensorProto.INT64, ["k"]),
                   _vi("picked", TensorProto.FLOAT, ["p"]), _vi("kept", TensorProto.FLOAT, ["q"]),
                   _vi("scaled", TensorProto.FLOAT, ["n"]), _vi("sel", TensorProto.INT64, ["s", 3])])


def _data_dependent_feeds():
    rng = np.random.default_rng(8)
    out = []
    for n, shift in ((6, 0.0), (6, -5.0), (6, 5.0), (1, 0.3), (9, 0.0)):
        b = 7
        xy = rng.random((1, b, 2), dtype=np.float32) * 10
        boxes = np.concatenate([xy, xy + 1 + rng.random((1, b, 2), dtype=np.float32) * 5], -1).astype(np.float32)
        out.append((f"n={n},shift={shift}", {"x": (rng.standard_normal(n) + shift).astype(np.float32),
                                              "boxes": boxes, "scores": rng.random((1, 1, b), dtype=np.float32)}))
    return out


def handwritten(make, feeds):
    return {"onnx": make, "feeds": feeds}


MODELS = {
    "ssdlite320_mobilenet_v3_large": detection("ssdlite320_mobilenet_v3_large"),
    "fasterrcnn_mobilenet_v3_large_320_fpn": detection("fasterrcnn_mobilenet_v3_large_320_fpn"),
    "retinanet_resnet50_fpn": detection("retinanet_resnet50_fpn", perturb=False),
    "fcos_resnet50_fpn": detection("fcos_resnet50_fpn"),
    "maskrcnn_resnet50_fpn": detection("maskrcnn_resnet50_fpn", ("boxes", "scores", "labels", "masks")),
    "keypointrcnn_resnet50_fpn": detection("keypointrcnn_resnet50_fpn",
                                           ("boxes", "scores", "labels", "keypoints", "keypoints_scores")),
    "lraspp_mobilenet_v3_large": segmentation("lraspp_mobilenet_v3_large"),
    "deeplabv3_mobilenet_v3_large": segmentation("deeplabv3_mobilenet_v3_large"),
    "raft_small": raft(),
    "r3d_18": video("r3d_18"),
    "mc3_18": video("mc3_18"),
    "script_if_for": scripted(_Branchy, ["x"], ["y", "acc"], {"x": {0: "n"}}, _branchy_feeds),
    "script_greedy_loop": scripted(_Greedy, ["h", "start", "steps"], ["tokens", "h_last"],
                                   {"h": {0: "b"}, "start": {0: "b"}}, _greedy_feeds),
    "onnx_if_loop": handwritten(onnx_if_loop, _if_loop_feeds),
    "onnx_scan_sequence": handwritten(onnx_scan_sequence, _scan_sequence_feeds),
    "onnx_data_dependent": handwritten(onnx_data_dependent, _data_dependent_feeds),
}


def export(name: str, path: Path, dynamo: bool = False) -> None:
    """Write MODELS[name] to `path` (TorchScript exporter opset 17, or torch.export opset 18)."""
    spec = MODELS[name]
    path.parent.mkdir(parents=True, exist_ok=True)
    if "onnx" in spec:
        model = spec["onnx"]()
        onnx.checker.check_model(model)
        onnx.save(model, path)
        return
    net, args = spec["build"]()
    kw = {"input_names": spec["inputs"], "output_names": spec["outputs"]}
    if dynamo:
        dims = {k: {a: torch.export.Dim.AUTO for a in v} for k, v in spec["axes"].items() if k in spec["inputs"]}
        torch.onnx.export(net, args, str(path), dynamo=True, opset_version=18, dynamic_shapes=dims, **kw)
    else:
        torch.onnx.export(net, args, str(path), dynamo=False, opset_version=17, dynamic_axes=spec["axes"], **kw)


def _session(path: Path, optimize: bool = False):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _rows_sorted(a: np.ndarray) -> np.ndarray:
    if a.ndim == 0 or a.shape[0] < 2:
        return a
    flat = a.reshape(a.shape[0], -1)
    return a[np.lexsort(flat.T[::-1])]


def _difference(a: np.ndarray, b: np.ndarray) -> float:
    if a.size == 0:
        return 0.0
    if a.dtype == bool:
        return float(np.mean(a != b))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    both = (np.isnan(a64) & np.isnan(b64)) | (a64 == b64)
    gap = np.where(both, 0.0, np.abs(a64 - b64))
    gap = np.where(np.isnan(gap), np.inf, gap)
    finite = a64[np.isfinite(a64)]
    return float(gap.max() / max(1.0, np.abs(finite).max() if finite.size else 1.0))


def check(original: Path, optimized: Path, feeds, rows: bool = False, ort_all: bool = False) -> dict:
    """Run both models on every feed; the largest difference, the feeds whose shapes or values
    differ (worst 1e-3), and for detection models the row counts seen. `ort_all`: the second
    model under onnxruntime's own graph optimizations (a control: the original against itself)."""
    a_sess, b_sess = _session(original), _session(optimized, ort_all)
    names = [o.name for o in a_sess.get_outputs()]
    worst, bad, counts, skipped = 0.0, [], [], []
    for label, feed in feeds:
        try:
            a = a_sess.run(None, feed)
        except Exception as e:  # noqa: BLE001  (the original does not run on this feed: skip it)
            skipped.append(f"{label}: the original fails ({type(e).__name__})")
            continue
        try:
            b = b_sess.run(None, feed)
        except Exception as e:  # noqa: BLE001
            bad.append(f"{label}: optimized fails: {str(e).splitlines()[0][:200]}")
            continue
        if rows:
            counts.append(f"{label}: {a[0].shape[0]}")
        for n, x, y in zip(names, a, b, strict=True):
            if x.shape != y.shape or x.dtype != y.dtype:
                bad.append(f"{label}: {n} {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
                continue
            d = _difference(x, y)
            if d > 1e-3 and rows:
                d = min(d, _difference(_rows_sorted(x), _rows_sorted(y)))
            worst = max(worst, d)
            if d > 1e-3:
                bad.append(f"{label}: {n} differs by {d:.3g}")
    return {"difference": worst, "bad": bad, "counts": counts, "skipped": skipped}


def run_eqsat(model: Path, timeout: float, *extra: str, suffix: str = ".opt.onnx") -> dict:
    """`eqsat optimize` with defaults (and `extra`) in a child process: exit code, wall time, the report."""
    out, rep = model.with_suffix(suffix), model.with_suffix(".json" if suffix == ".opt.onnx" else suffix + ".json")
    for p in (out, rep):
        p.unlink(missing_ok=True)
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "EQSAT_ROOT": str(ROOT), "PYTHONPATH": path}
    t = time.time()
    try:
        cmd = [sys.executable, "-m", "eqsat", "optimize", str(model), "-o", str(out), "--report", str(rep), *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired as e:  # what it said before (the phase it was in)
        rc, err = "timeout", e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    rec = {"rc": rc, "wall_s": time.time() - t, "stderr_tail": err.strip().splitlines()[-3:] if err else []}
    if rep.exists():
        r = json.loads(rep.read_text())
        rec.update(nodes=f"{r['nodes_before']} -> {r['nodes_after']}", verification=r["verification"].get("status"),
                   verification_detail=r["verification"].get("detail", ""))
    return rec


def unverified(rec: dict, out: Path, timeout: float) -> None:
    """For a refused model (exit 1): eqsat's program written with --no-verify, checked as `check`
    checks a written one, beside the original under onnxruntime's own optimizations (a control:
    how far rounding alone moves these outputs), into rec["unverified"]."""
    name = rec["name"].split()[0]
    path = out / (f"{name}.dynamo.onnx" if rec["name"].endswith("(dynamo)") else f"{name}.onnx")
    got = run_eqsat(path, timeout, "--no-verify", suffix=".nv.onnx")
    if got["rc"] != 0:
        rec["unverified"] = {"rc": got["rc"]}
        return
    spec = MODELS[name]
    feeds, rows = spec["feeds"](), spec.get("rows", False)
    mine = check(path, path.with_suffix(".nv.onnx"), feeds, rows)
    control = check(path, path, feeds, rows, ort_all=True)
    rec["unverified"] = {"difference": mine["difference"], "bad": mine["bad"], "ort_all": control["difference"]}


def one(name: str, out: Path, timeout: float, dynamo: bool) -> dict:
    """Export (kept if present), optimize and check one model: its record."""
    path = out / (f"{name}.dynamo.onnx" if dynamo else f"{name}.onnx")
    rec: dict = {"name": name + (" (dynamo)" if dynamo else "")}
    t = time.time()
    if not path.exists():
        try:
            export(name, path, dynamo)
        except Exception as e:  # noqa: BLE001  (an exporter's failure is a row of the table)
            rec.update(export=f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
            traceback.print_exc()
            return rec
        rec["export_s"] = time.time() - t
    m = onnx.load(path, load_external_data=False)
    ops = {n.op_type for n in m.graph.node}
    rec.update(export="ok", exported_nodes=len(m.graph.node),
               flow=",".join(sorted(ops & {"If", "Loop", "Scan", "NonZero", "NonMaxSuppression", "TopK", "RoiAlign",
                                           "Resize", "SplitToSequence", "ConcatFromSequence", "Compress"})))
    rec.update(run_eqsat(path, timeout), eqsat=_commit())
    if rec["rc"] == 0:
        spec = MODELS[name]
        try:
            rec.update(check(path, path.with_suffix(".opt.onnx"), spec["feeds"](), spec.get("rows", False)))
        except Exception as e:  # noqa: BLE001
            rec.update(bad=[f"check failed: {type(e).__name__}: {e}"], difference=float("nan"))
    print(json.dumps(rec), file=sys.stderr, flush=True)
    return rec


def _commit() -> str:
    """The checkout's commit, with `+` where eqsat/ or rules/ differ from it."""
    git = ["git", "-C", str(ROOT)]
    sha = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "eqsat", "rules"], capture_output=True, text=True).stdout
    return sha + ("+" if dirty.strip() else "")


def _versions() -> str:
    names = ("torch", "torchvision", "onnx", "onnxruntime", "egglog")
    pk = ", ".join(f"{p} {importlib.metadata.version(p)}" for p in names)
    git = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
    sha = subprocess.run(git, capture_output=True, text=True).stdout
    return f"Python {platform.python_version()}, {pk}; eqsat from the checkout at {sha.strip()}"


def table(records: list[dict], command: str) -> str:
    lines = ["# eqsat on models with control flow and data-dependent shapes", "",
             f"Command: `{command}`. Written by `benchmarks/control_flow_models.py`.", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}; "
             "shared with other work while measuring, so times are noisy.", "", f"Packages: {_versions()}.", "",
             "**flow**: the exported graph's control-flow and data-dependent ops; **eqsat at**: the "
             "checkout's commit when the row was measured (`+`: eqsat/ or rules/ changed since); "
             "**rc**: `eqsat optimize` with defaults; **verification**: the report's status; "
             "**check**: the largest |difference| / "
             "max(1, max |original|) of the written model against the original under onnxruntime (optimizations "
             "off) over this script's inputs, not eqsat's (`check`), and the inputs where shapes or values differ; "
             "**detections**: the original's row count per input (size * scale).", "",
             "| model | export | exported nodes | flow | eqsat at | rc | verification | nodes | wall s | check "
             "| detections |",
             "|---|---|---:|---|---|---:|---|---|---:|---|---|"]
    for r in records:
        chk = "" if "difference" not in r else f"{r['difference']:.1e}" + (
            "; " + "; ".join(r["bad"][:4]) if r.get("bad") else "")
        if "difference" in r.get("unverified", {}):
            u = r["unverified"]
            chk = (f"refused; with --no-verify {u['difference']:.1e}, onnxruntime's own optimizations "
                   f"{u['ort_all']:.1e}")
        wall = f"{r['wall_s']:.0f}" if "wall_s" in r else ""
        cnt = ", ".join(c.split(": ", 1)[1] for c in r.get("counts", []) if ": " in c)
        cells = [r["name"], r["export"], r.get("exported_nodes", ""), r.get("flow", ""), r.get("eqsat", ""),
                 r.get("rc", ""),
                 r.get("verification", ""), r.get("nodes", ""), wall, chk, cnt]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "models" / "control-flow")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "control-flow-models.md")
    ap.add_argument("--only", help="comma-separated names of MODELS")
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument("--dynamo", action="store_true", help="the torch.export exporter (opset 18)")
    ap.add_argument("--table-only", action="store_true", help="write FILE from DIR/results.json, run nothing")
    ap.add_argument("--refused", action="store_true",
                    help="for the selected models refused before (exit 1, in DIR/results.json): `unverified`")
    args = ap.parse_args(argv)
    names = args.only.split(",") if args.only else list(MODELS)
    # records of earlier runs into the same DIR are kept (by row name): runs with --only and
    # --dynamo add to one table
    store = args.out / "results.json"

    def load() -> dict:
        return {r["name"]: r for r in json.loads(store.read_text())} if store.exists() else {}

    kept = load()
    for n in [] if args.table_only else names:
        row = n + (" (dynamo)" if args.dynamo else "")
        if args.refused:
            if kept.get(row, {}).get("rc") == 1:
                rec = kept[row]
                unverified(rec, args.out, args.timeout)
            else:
                continue
        else:
            rec = one(n, args.out, args.timeout, args.dynamo)
        kept = {**load(), rec["name"]: rec}  # (another run into DIR may have added rows meanwhile)
        store.write_text(json.dumps(list(kept.values()), indent=1))
    order = {n: i for i, n in enumerate(MODELS)}
    records = sorted(kept.values(), key=lambda r: (r["name"].endswith("(dynamo)"), order.get(r["name"].split()[0], 99)))
    command = "python benchmarks/control_flow_models.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(table(records, command.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
