"""onnx's C++ shape inference in a forked child: an assertion or a segmentation fault in it
(a malformed node the onnx checker lets through) ends the child, not eqsat.

Contract of `infer_shapes`: the same answer as `onnx.shape_inference.infer_shapes` with the
same arguments, its exceptions included (as ShapeInferenceError with the first line of the
message); where the child dies by a signal, InvalidModelError (exit 2) naming the signal.
On a system without `fork` it runs in-process. The model crosses as bytes: callers pass
skeletons (eqsat.shapes), whose large tensors have no data.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import warnings

import onnx
from onnx import ModelProto

from .errors import InvalidModelError


class ShapeInferenceError(Exception):
    """onnx's shape inference raised (in the child): its message's first line."""


def infer_shapes(model: ModelProto, what: str = "the model", **kwargs) -> ModelProto:
    if not hasattr(os, "fork"):
        return onnx.shape_inference.infer_shapes(model, **kwargs)
    data = model.SerializeToString()
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python >= 3.12 warns when threads exist
        pid = os.fork()
    if pid == 0:  # the child: no Python cleanup, no exception handlers of the caller
        code = 0
        try:
            os.close(r)
            faulthandler.disable()  # a crash is reported by the parent, in one line
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)  # and onnx's assertion text stays off the user's terminal
            try:
                out = b"\0" + onnx.shape_inference.infer_shapes(ModelProto.FromString(data), **kwargs).SerializeToString()
            except Exception as e:  # noqa: BLE001 - sent to the parent, which raises it
                out = b"\1" + ((str(e).strip().splitlines() or [type(e).__name__])[0]).encode("utf-8", "replace")
            with os.fdopen(w, "wb") as f:
                f.write(out)
        except BaseException:  # noqa: BLE001 - the parent sees an empty answer
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "unknown"
        raise InvalidModelError(f"{what}: onnx's shape inference crashed on it (signal {sig}, {name}): a node is "
                                "malformed in a way the onnx checker does not see; check each node against its "
                                "operator's specification")
    if not out:
        raise ShapeInferenceError("onnx's shape inference gave no answer")
    if out[:1] == b"\1":
        raise ShapeInferenceError(out[1:].decode("utf-8", "replace"))
    return ModelProto.FromString(out[1:])
