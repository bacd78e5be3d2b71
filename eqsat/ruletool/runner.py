"""onnxruntime in a child process for `rules check`: a kernel that kills its process (the
blocked MaxPool divides by zero on an empty image: SIGFPE) kills the child, not the check.

Contract: `run(model, feeds)` runs a serialized ONNX model (onnxruntime's optimizations
off, one thread) and returns its outputs in graph order; it raises `RunError` with
onnxruntime's message, or with the signal when the child died, and the next call starts a
new child. The child lives until the parent exits (`close()` stops it sooner).
"""

from __future__ import annotations

import atexit
import pickle
import signal
import struct
import subprocess
import sys

_HEADER = struct.Struct("<Q")
_child: subprocess.Popen | None = None


class RunError(Exception):
    pass


def _send(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _recv(stream):
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError
    n = _HEADER.unpack(head)[0]
    data = stream.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)  # noqa: S301 - our own child's answer


def serve() -> None:
    """The child's loop: (model bytes, feeds) in, ("ok", outputs) or ("error", text) out."""
    import onnxruntime as ort

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    while True:
        try:
            model, feeds = _recv(inp)
        except EOFError:
            return
        try:
            sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
            _send(out, ("ok", sess.run(None, feeds)))
        except Exception as e:  # noqa: BLE001 - onnxruntime's errors have many types
            _send(out, ("error", str(e)))


def _start() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from eqsat.ruletool.runner import serve; serve()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def run(model: bytes, feeds: dict) -> list:
    global _child
    if _child is None or _child.poll() is not None:
        _child = _start()
    try:
        _send(_child.stdin, (model, feeds))
        kind, value = _recv(_child.stdout)
    except (EOFError, OSError):
        code = _child.wait()
        _child = None
        try:
            why = signal.Signals(-code).name if code < 0 else f"exit status {code}"
        except ValueError:
            why = f"exit status {code}"
        raise RunError(f"onnxruntime stopped its process ({why})") from None
    if kind == "error":
        raise RunError(value)
    return value


def close() -> None:
    global _child
    if _child is not None:
        try:
            _child.stdin.close()
            _child.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            _child.kill()
            _child.wait()
        _child = None


atexit.register(close)
