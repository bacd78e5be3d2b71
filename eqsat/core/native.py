"""onnx's C++ shape inference in a child process: an assertion or a segmentation fault in it
(a malformed node the onnx checker lets through) ends the child, not eqsat.

Contract of `infer_shapes`: the same answer as `onnx.shape_inference.infer_shapes` with the
same arguments; its exceptions come back as ShapeInferenceError with the first line of the
message; where the child dies by a signal, InvalidModelError (exit 2) naming the signal.
On a system without `fork` it runs in-process.

The child is forked once, at the first call, and serves every later call of this process
over a pair of pipes (a fork per call cost about 20 ms in a large process); after a crash
the next call forks a new one. It ignores SIGINT (the caller is interrupted instead) and
ends when the caller's end of the pipe closes. Models cross as bytes: callers pass
skeletons (eqsat.core.shapes), whose large tensors have no data.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import struct
import warnings

import onnx
from onnx import ModelProto

from eqsat.errors import InvalidModelError

_HEAD = struct.Struct("<IQ")  # request: length of the JSON keyword arguments, of the model
_LEN = struct.Struct("<Q")  # answer: its length, then a status byte and the model or message


class ShapeInferenceError(Exception):
    """onnx's shape inference raised (in the child): its message's first line."""


_server: tuple[int, int, int, int] | None = None  # (owner pid, child pid, request fd, answer fd)


def infer_shapes(model: ModelProto, what: str = "the model", **kwargs) -> ModelProto:
    if not hasattr(os, "fork"):
        return onnx.shape_inference.infer_shapes(model, **kwargs)
    global _server
    if _server is None or _server[0] != os.getpid():  # none yet, or inherited from a parent process
        _server = _start()
    _, pid, req, ans = _server
    args = json.dumps(kwargs).encode()
    data = model.SerializeToString()
    try:
        try:
            _write(req, _HEAD.pack(len(args), len(data)) + args + data)
        except BrokenPipeError:  # the child died before it read the whole request
            out = None
        else:
            head = _read(ans, _LEN.size)
            out = _read(ans, _LEN.unpack(head)[0]) if head is not None else None
    except BaseException:
        _stop()  # an interrupt mid-answer leaves the pipe out of step
        raise
    if out is None:  # the child died
        _stop()
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = "unknown"
            raise InvalidModelError(f"{what}: onnx's shape inference crashed on it (signal {sig}, {name}): a node "
                                    "is malformed in a way the onnx checker does not see; check each node against "
                                    "its operator's specification")
        raise ShapeInferenceError("onnx's shape inference ended without an answer")
    if out[:1] == b"\1":
        raise ShapeInferenceError(out[1:].decode("utf-8", "replace"))
    return ModelProto.FromString(out[1:])


def _start() -> tuple[int, int, int, int]:
    req_r, req_w = os.pipe()
    ans_r, ans_w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python >= 3.12 warns when threads exist
        pid = os.fork()
    if pid == 0:
        os.close(req_w)
        os.close(ans_r)
        _serve(req_r, ans_w)  # never returns
    os.close(req_r)
    os.close(ans_w)
    return os.getpid(), pid, req_w, ans_r


def _stop() -> None:
    global _server
    if _server is not None and _server[0] == os.getpid():
        for fd in _server[2:]:
            try:
                os.close(fd)
            except OSError:
                pass
    _server = None


def _serve(req: int, ans: int) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        faulthandler.disable()  # a crash is reported by the caller, in one line
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)  # and onnx's assertion text stays off the user's terminal
        while (head := _read(req, _HEAD.size)) is not None:
            n_args, n_data = _HEAD.unpack(head)
            kwargs = json.loads(_read(req, n_args) or b"{}")
            data = _read(req, n_data) or b""
            try:
                out = b"\0" + onnx.shape_inference.infer_shapes(ModelProto.FromString(data),
                                                                **kwargs).SerializeToString()
            except Exception as e:  # noqa: BLE001 - sent to the caller, which raises it
                out = b"\1" + ((str(e).strip().splitlines() or [type(e).__name__])[0]).encode("utf-8", "replace")
            _write(ans, _LEN.pack(len(out)) + out)
    except BaseException:  # noqa: BLE001 - the caller sees the pipe close
        code = 1
    os._exit(code)


def _read(fd: int, n: int) -> bytes | None:
    """Exactly n bytes, or None at the end of the pipe."""
    parts, left = [], n
    while left:
        b = os.read(fd, min(left, 1 << 20))
        if not b:
            return None
        parts.append(b)
        left -= len(b)
    return b"".join(parts)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
