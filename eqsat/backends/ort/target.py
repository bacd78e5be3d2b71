"""Targets: which ops an optimized model may contain.

- `ort` (the default): standard ONNX ops of the model's opset, and onnxruntime's contrib ops
  (com.microsoft, and the few it registers in the ai.onnx domain).
- `onnx`: standard ONNX ops of the model's opset only.

Rules see the target as `(opset DOMAIN)` facts and guard on them; extraction also never
picks an op the target lacks (a safety net for user rules that do not guard).

NCHWc (the default for `ort`; `eqsat optimize --layout nchw`, or `EQSAT_NCHWC=0` in the
environment, turns it off): for `ort`, where onnxruntime's CPU kernels have a
channel-blocked layout (MLAS), the facts also say so: `(opset "com.microsoft.nchwc")` is 1
and `(layout-block "nchwc")` is the block size that the installed onnxruntime uses on this
machine (8 with AVX2, 16 with AVX-512), probed once per process; rules/layout.egg guards on
both. Where onnxruntime lacks the kernels (no onnxruntime, a CPU without AVX2) the probe
says 0 and the model stays NCHW. A model that holds NCHWc ops and blocked filters runs
correctly only where onnxruntime has the same block size, on its CPU execution provider
(as onnxruntime's own saved ORT_ENABLE_ALL models): use `--layout nchw` for a model meant
for another machine or provider. The exact (ILP) extractor chooses each value's layout with the
rest of the program (extract/ilp.py); `--extractor ilp-fixed-layouts` fixes them from the
greedy answer first. `EQSAT_NCHWC_BLOCK=N`
forces a block size (tests).
Channels-last quantized convolutions (com.microsoft.QLinearConv with channels_last = 1, as
onnxruntime's NhwcTransformer writes them; rules/qdq_nhwc.egg): for `ort` unless `--layout
nchw`, `(layout-block "nhwc")` is 1. They run on any CPU onnxruntime runs on (no block size);
the cost model decides where the Transposes they need pay.
eqsat's internal ops (domain eqsat.internal) are always forbidden: they exist to be folded.

Quantized kernels: `(exact-kernel "u8s8")` is 1 for `ort` where onnxruntime's uint8 x int8
kernels sum exactly on this machine (int8 dot products), probed once per process
(`u8s8_exact`; `EQSAT_U8S8_EXACT` forces it). rules/qdq.egg then keeps a QDQ model's int8
weights as they are; elsewhere, and for `onnx`, it writes full-range int8 weights as uint8,
exact on every CPU. A model written where the kernel is exact and run on an AVX2 CPU without
VNNI has the 16-bit saturation there that onnxruntime's own optimized model has: set
`EQSAT_U8S8_EXACT=0` for a model meant for another machine.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import onnx
from onnx import ModelProto, TensorProto, helper

from eqsat.environment import nchwc_block_override, switch, u8s8_exact_override
from eqsat.errors import UsageError
from eqsat.lang import terms as T
from eqsat.lang.contrib import INTERNAL_DOMAIN
from eqsat.lang.ops import SPECS

TARGETS = ("ort", "onnx")
MS_DOMAIN = "com.microsoft"
NCHWC_DOMAIN = "com.microsoft.nchwc"


@functools.cache
def nchwc_block(enabled: bool = True) -> int:
    """onnxruntime's NCHWc channel block on this machine, or 0 where it is not used (the
    layout turned off by `enabled` False (`--layout nchw`) or EQSAT_NCHWC=0, no onnxruntime,
    a CPU without blocked kernels).
    Cached per process (tests clear it with nchwc_block.cache_clear()). Probed by running
    ReorderInput on four channels (its minimum): the output pads them to one block, unless
    EQSAT_NCHWC_BLOCK forces one. A bad EQSAT_NCHWC or EQSAT_NCHWC_BLOCK is a UsageError
    (eqsat.environment)."""
    nchwc = switch("EQSAT_NCHWC")
    forced = nchwc_block_override()
    if not enabled or not nchwc:
        return 0
    if forced is not None:
        return forced
    try:
        import numpy as np
        import onnxruntime as ort

        node = helper.make_node("ReorderInput", ["x"], ["y"], domain=NCHWC_DOMAIN)
        g = helper.make_graph([node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(NCHWC_DOMAIN, 1)])
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        block = int(sess.run(None, {"x": np.ones((1, 4, 1, 1), np.float32)})[0].shape[1])
    except Exception:  # noqa: BLE001 - no onnxruntime or no NCHWc kernels: no blocked layout
        return 0
    return block if block > 1 else 0


def model_opsets(model: ModelProto) -> dict[str, int]:
    return {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}


def u8s8_exact() -> bool:
    """Whether onnxruntime's uint8 x int8 integer kernels sum exactly on this machine (CPUs
    with int8 dot products: AVX512-VNNI, AVX-VNNI, ARM), where on AVX2 without them a pair of
    products is summed in 16 bits and saturates (255 * -128 twice). Probed once per process
    by a QLinearConv whose every pair of products overflows 16 bits: 64 channels (a reduction
    as long as a real convolution's, so the kernel takes its usual path) of 255 times -128 sum
    to -2088960, which requantized by 1 / 16000 and zero point 255 gives 124 (189 where the 32
    pairs saturate at -32768; no value near a rounding tie). EQSAT_U8S8_EXACT forces the
    answer; False without onnxruntime."""
    forced = u8s8_exact_override()
    return _probe_u8s8() if forced is None else forced


@functools.cache
def _probe_u8s8() -> bool:
    try:
        import numpy as np
        import onnxruntime as ort

        from eqsat.backends.ort.qlinear_conv import qlinear_conv_model

        c = 64
        m = qlinear_conv_model([1, c, 1, 1], {"w": np.full((1, c, 1, 1), -128, np.int8), "x_scale": np.float32(1),
                                              "x_zero_point": np.uint8(0), "w_scale": np.float32(1),
                                              "w_zero_point": np.int8(0), "y_scale": np.float32(16000),
                                              "y_zero_point": np.uint8(255)})
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        y = sess.run(None, {"x": np.full((1, c, 1, 1), 255, np.uint8)})[0]
    except Exception:  # noqa: BLE001 - no onnxruntime: nothing is known to be exact
        return False
    return int(y.ravel()[0]) == 124


def opset_facts(model: ModelProto, target: str, layout: str = "nchwc") -> list:
    if target not in TARGETS:
        raise UsageError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    ops = model_opsets(model)
    facts = [T.set_fn("opset", [T.string(d)], T.i64(v)) for d, v in sorted(ops.items()) if d in ("", MS_DOMAIN)]
    if target == "ort":
        facts.append(T.set_fn("opset", [T.string(MS_DOMAIN)], T.i64(max(1, ops.get(MS_DOMAIN, 1)))))
        if layout == "nchwc":  # not --layout nchw: channels-last QLinearConv (rules/qdq_nhwc.egg)
            facts.append(T.set_fn("layout-block", [T.string("nhwc")], T.i64(1)))
        block = nchwc_block(layout == "nchwc")
        if block:
            facts.append(T.set_fn("opset", [T.string(NCHWC_DOMAIN)], T.i64(1)))
            facts.append(T.set_fn("layout-block", [T.string("nchwc")], T.i64(block)))
    facts.append(T.set_fn("exact-kernel", [T.string("u8s8")], T.i64(int(target == "ort" and u8s8_exact()))))
    return facts


def hardware_profile(hardware):
    """The profile that `hardware` stands for on this machine. `cpu` (the default) is the
    shipped CPU profile measured with onnxruntime's NCHWc block of this machine (its
    layouts.nchwc.block: cpu.json 16, AVX-512; cpu-avx2.json 8), because a profile's rates
    and layout figures hold for the vector width it was measured with; cpu.json where none
    matches (no blocked kernels). Other names, paths and Hardware objects are returned as
    they are: a machine's own `eqsat calibrate` profile is the better choice still."""
    if hardware != "cpu":
        return hardware
    from eqsat.extract.costs.roofline import HARDWARE_DIR

    block = nchwc_block()
    for path in sorted(HARDWARE_DIR.glob("cpu*.json")):
        try:
            nchwc = json.loads(path.read_text()).get("layouts", {}).get("nchwc", {})
        except (OSError, ValueError):
            continue
        if block and nchwc.get("block") == block:
            return path.stem
    return hardware


def effective_layout(target: str, layout: str) -> str:
    """The layout the rules may use: `nchwc` only with `--target ort` where the installed
    onnxruntime has the blocked kernels (`nchwc_block`), else `nchw`."""
    return "nchwc" if target == "ort" and layout == "nchwc" and nchwc_block() else "nchw"


def foreign_block_warning(hardware, layout: str = "nchwc") -> str | None:
    """A warning when the profile's NCHWc figures were measured with another block than this
    machine's onnxruntime uses (an AVX2 profile on an AVX-512 machine, or the reverse): the
    blocked layout's speed-ups it claims need not hold here. None when they match, when the
    profile or the machine has no blocked layout, or when the layout is not asked for."""
    from eqsat.extract.costs.roofline import Hardware

    if layout != "nchwc":
        return None
    hw = hardware if isinstance(hardware, Hardware) else Hardware.load(hardware)
    theirs = hw.layouts.get("nchwc", {}).get("block")
    ours = nchwc_block()
    if not theirs or not ours or theirs == ours:
        return None
    return (f"hardware profile {hw.name} was measured with onnxruntime's NCHWc block {theirs}, this machine's "
            f"is {ours}: its layout figures need not hold here (`eqsat calibrate -o mine.json`, then "
            "--hardware mine.json, measures this machine)")


def profile_id(hardware) -> str:
    """How a saved e-graph names its profile: a profile file by its absolute path (so that
    `eqsat extract` finds it from any folder), a shipped one by its name."""
    h = str(getattr(hardware, "name", hardware))
    return str(Path(h).resolve()) if Path(h).suffix and Path(h).is_file() else h


def hardware_facts(hardware) -> list:
    """Facts from the hardware profile (a name, a .json path or a Hardware) that rules guard
    on: (hardware-pays "parallel-matmul") = 1 where one MatMul on concatenated weights is
    faster than the parallel MatMuls (profile key merge_parallel_matmuls; rules/matmul.egg);
    (hardware-pays "skip-layernorm") = 1 where onnxruntime's Skip(Simplified)LayerNormalization
    is faster than Add + (RMS) LayerNormalization (fuse_skip_layernorm; rules/transformer.egg);
    (hardware-pays "attention") = 1 where MultiHeadAttention / Attention is faster than the
    attention subgraph (fuse_attention; rules/attention.egg); (hardware-pays
    "attention-unmasked") = 1 where it is for attention without a mask
    (fuse_unmasked_attention); (hardware-pays "attention-cached") = 1 where MultiHeadAttention
    with past_key / past_value is faster than a decoder step's attention with its cache
    Concats (fuse_cached_attention); (hardware-pays "grouped-query-matmul") = 1 where grouped-query
    attention's products run on the kv heads unrepeated (grouped_query_matmul); (hardware-pays
    "pad-contraction") = 1 where a product whose left operand's rows alias in the cache is
    slower than padded (contraction_alias_slowdown >= 1.03; rules/contraction.egg)."""
    from eqsat.extract.costs.roofline import Hardware

    hw = hardware if isinstance(hardware, Hardware) else Hardware.load(hardware)
    facts = []
    if hw.merge_parallel_matmuls:
        facts.append(T.set_fn("hardware-pays", [T.string("parallel-matmul")], T.i64(1)))
    if hw.fuse_skip_layernorm:
        facts.append(T.set_fn("hardware-pays", [T.string("skip-layernorm")], T.i64(1)))
    if hw.fuse_attention:
        facts.append(T.set_fn("hardware-pays", [T.string("attention")], T.i64(1)))
    if hw.fuse_unmasked_attention:
        facts.append(T.set_fn("hardware-pays", [T.string("attention-unmasked")], T.i64(1)))
    if hw.fuse_cached_attention:
        facts.append(T.set_fn("hardware-pays", [T.string("attention-cached")], T.i64(1)))
    if hw.grouped_query_matmul:
        facts.append(T.set_fn("hardware-pays", [T.string("grouped-query-matmul")], T.i64(1)))
    if hw.pads_contraction():
        facts.append(T.set_fn("hardware-pays", [T.string("pad-contraction")], T.i64(1)))
    return facts


def forbidden_constructors(model: ModelProto, target: str) -> list[str]:
    """Typed ops an extraction must not choose: contrib ops for target onnx (unless the
    input model holds them: NCHWc ops of its domain, the others by op), eqsat's internal ops always, and standard ops
    that
    do not exist at the model's opset (LayerNormalization before 17, ...)."""
    ops = model_opsets(model)
    present = {("" if n.domain == "ai.onnx" else n.domain, n.op_type) for n in model.graph.node}
    out = []
    for spec in SPECS:
        if spec.domain == INTERNAL_DOMAIN:
            out.append(spec.ctor)
            continue
        if spec.domain == NCHWC_DOMAIN:
            # onnxruntime ops, also where eqsat does not produce them (layout off): an input
            # model's own NCHWc ops (an onnxruntime-optimized model) stay extractable
            if target != "ort" and NCHWC_DOMAIN not in ops:
                out.append(spec.ctor)
            continue
        if spec.contrib:
            # target onnx: eqsat introduces none, but an op the input model holds stays
            # extractable (else its value would have no term at all)
            if target != "ort" and (spec.domain, spec.onnx_type) not in present:
                out.append(spec.ctor)
            continue
        version = ops.get(spec.domain)
        try:
            ok = version is not None and onnx.defs.get_schema(spec.onnx_type, version,
                                                              spec.domain).since_version >= spec.min_version
        except Exception:  # noqa: BLE001 - no schema at this opset
            ok = False
        if not ok:
            out.append(spec.ctor)
    return sorted(out)
