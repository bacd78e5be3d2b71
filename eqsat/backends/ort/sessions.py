"""onnxruntime, imported on first use, and its inference sessions as eqsat runs them: one
intra-op thread, no logging, the CPU provider unless told otherwise.

The layer below eqsat.verification (which re-exports `ort` and `session`) and eqsat.verification.standins,
which both run models: onnxruntime is optional at import time (`eqsat[cpu]` or `eqsat[gpu]`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from eqsat.errors import EqsatError

if TYPE_CHECKING:
    from onnx import ModelProto


def ort():
    """The onnxruntime module; EqsatError when it is not installed or cannot be loaded."""
    try:
        import onnxruntime
    except ModuleNotFoundError:
        raise EqsatError(
            "onnxruntime is not installed: pip install 'eqsat[cpu]' (or 'eqsat[gpu]')"
        ) from None
    except ImportError as e:  # installed but failed to load (a memory cap, a missing library)
        raise EqsatError(f"onnxruntime could not be loaded: {e}") from None
    return onnxruntime


def session(model: ModelProto | str | os.PathLike, optimize: bool = True, threads: int = 1,
            providers: list[str] | None = None, disabled_optimizers: list[str] | None = None,
            config: dict[str, str] | None = None):
    """An onnxruntime InferenceSession of `model` (a ModelProto or an ONNX file, whatever its
    name), with onnxruntime's graph optimizations unless `optimize` is False (less the
    transformers named in `disabled_optimizers`), and the session `config` entries given."""
    rt = ort()
    so = rt.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    for key, val in (config or {}).items():
        so.add_session_config_entry(key, val)
    if not optimize:
        so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_DISABLE_ALL
    providers = providers or ["CPUExecutionProvider"]
    extra = {"disabled_optimizers": disabled_optimizers} if disabled_optimizers else {}
    if isinstance(model, (str, os.PathLike)):
        # an ONNX model, whatever its name (onnxruntime reads a path ending in .ort as its own format)
        so.add_session_config_entry("session.load_model_format", "ONNX")
        return rt.InferenceSession(str(model), so, providers=providers, **extra)
    from eqsat.io.modelio import on_disk, save_model

    if on_disk(model):
        # weights on disk or too big for one protobuf: run it from a saved copy
        with tempfile.TemporaryDirectory(prefix="eqsat-run-") as d:
            path = save_model(model, Path(d) / "model.onnx", check=False)
            return rt.InferenceSession(str(path), so, providers=providers, **extra)
    return rt.InferenceSession(model.SerializeToString(), so, providers=providers, **extra)
