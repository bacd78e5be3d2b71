"""Targets: which ops an optimized model may contain.

- `ort` (the default): standard ONNX ops of the model's opset, and onnxruntime's contrib ops
  (com.microsoft, and the few it registers in the ai.onnx domain).
- `onnx`: standard ONNX ops of the model's opset only.

Rules see the target as `(opset DOMAIN)` facts and guard on them; extraction also never
picks an op the target lacks (a safety net for user rules that do not guard).
"""

from __future__ import annotations

import onnx
from onnx import ModelProto

from .errors import UsageError
from .lang import terms as T
from .lang.ops import SPECS

TARGETS = ("ort", "onnx")
MS_DOMAIN = "com.microsoft"


def model_opsets(model: ModelProto) -> dict[str, int]:
    return {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}


def opset_facts(model: ModelProto, target: str) -> list:
    if target not in TARGETS:
        raise UsageError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    ops = model_opsets(model)
    facts = [T.set_fn("opset", [T.string(d)], T.i64(v)) for d, v in sorted(ops.items()) if d in ("", MS_DOMAIN)]
    if target == "ort":
        facts.append(T.set_fn("opset", [T.string(MS_DOMAIN)], T.i64(max(1, ops.get(MS_DOMAIN, 1)))))
    return facts


def forbidden_constructors(model: ModelProto, target: str) -> list[str]:
    """Typed ops an extraction must not choose: contrib ops for target onnx, and standard
    ops that do not exist at the model's opset (LayerNormalization before 17, ...)."""
    ops = model_opsets(model)
    out = []
    for spec in SPECS:
        if spec.contrib:
            if target != "ort":
                out.append(spec.ctor)
            continue
        version = ops.get(spec.domain)
        try:
            ok = version is not None and onnx.defs.get_schema(spec.onnx_type, version, spec.domain).since_version >= spec.min_version
        except Exception:  # noqa: BLE001 - no schema at this opset
            ok = False
        if not ok:
            out.append(spec.ctor)
    return sorted(out)
