"""Verification in a child process: a crash of onnxruntime (a SIGFPE on INT64_MIN / -1, a
segmentation fault in a kernel) ends the child, not eqsat.

Contract of `verify_isolated`: the same answer as `eqsat.verification.verify` run in-process,
except where onnxruntime kills the process. Then, if it died running the original on
integers drawn by their use, verification is run again with integers 0 or 1; if it died
running the optimized model, or the original even so, the answer is "failed: onnxruntime
crashed (signal N, NAME) running the original/optimized model" (exit 1: the command writes
nothing). If it died running the original on an edge case (verify._edge_runs: special
values, empty sizes), verification is run again without them, and a pass says so. The two models are read by the
child from files: the caller's, or temporary copies
that are removed afterwards.

`verify_isolated` returns that answer as the fields of an eqsat.verification.Verification
(status, detail, ...), which `verify` makes one of: this module is below eqsat.verification and
does not import it. The child is `python -m eqsat.verification.isolate_child`, which does: a JSON request on
stdin, and on stdout one line per step ("@load original", "@run optimized", ...) before the step
is taken, then "@result" and the answer as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from onnx import ModelProto

from eqsat.errors import EqsatError


def verify_isolated(original: ModelProto, optimized: ModelProto, runs: int, rtol: float | None, atol: float | None,
                    dims: dict[str, int] | None, files: tuple, random_pairs: dict[str, str] | None) -> dict:
    """What eqsat.verification.verify answers for these arguments, run in a child process, as
    the Verification's fields; a crash of onnxruntime as the module docstring says."""
    from eqsat.io.modelio import save_model

    with tempfile.TemporaryDirectory(prefix="eqsat-verify-") as scratch:
        paths = []
        for model, given, name in ((original, files[0], "original.onnx"), (optimized, files[1], "optimized.onnx")):
            if given is None:
                given = save_model(model, Path(scratch) / name, check=False)
            paths.append(str(Path(given).resolve()))
        request = {"original": paths[0], "optimized": paths[1], "runs": runs, "rtol": rtol, "atol": atol,
                   "dims": dict(dims or {}), "random_pairs": dict(random_pairs or {}), "narrow": False,
                   "edges": True}
        answer, last, code = _child(request)
        if answer is None and last == "original":  # perhaps only the integers drawn by use: 0 or 1 then
            answer, last, code = _child(dict(request, narrow=True))
        crashed = ""
        if answer is None and last == "edge:original":  # on special values or empty sizes: not ours to check
            crashed = (f"; not on special values and empty sizes: onnxruntime crashed ({_signal(code)}) "
                       "running the original on them")
            answer, last, code = _child(dict(request, edges=False))
        if answer is not None:
            if crashed and answer["status"] == "passed":
                answer["detail"] += crashed
            return answer
        on = " on special values or empty sizes" if last and last.startswith("edge:") else ""
        model = (last or "original").removeprefix("edge:")
        return {"status": "failed", "detail": f"onnxruntime crashed ({_signal(code)}) running the {model} model{on}"}


def probe(models: list, feeds: dict, names: list[str]) -> str | None:
    """Run each model (a ModelProto or a file) once on `feeds` under onnxruntime (its own
    optimizations off) in a child process. None when none of them crashed onnxruntime, else
    "onnxruntime crashed (signal N, NAME) running NAME" for the first that did. An error
    that onnxruntime raises is not a crash: the caller's own run reports it."""
    import numpy as np

    from eqsat.io.modelio import save_model

    with tempfile.TemporaryDirectory(prefix="eqsat-probe-") as scratch:
        paths = []
        for k, m in enumerate(models):
            paths.append(str(m) if isinstance(m, str | os.PathLike) else
                         str(save_model(m, Path(scratch) / f"m{k}.onnx", check=False)))
        np.savez(Path(scratch) / "feeds.npz", **{k: np.asarray(v) for k, v in feeds.items()})
        answer, last, code = _child({"probe": paths, "feeds": str(Path(scratch) / "feeds.npz")})
    if answer is not None:
        return None
    which = names[int(last.split()[-1])] if last and last.startswith("run ") else names[0]
    return f"onnxruntime crashed ({_signal(code)}) running {which}"


def _child(request: dict) -> tuple[dict | None, str | None, int]:
    """(the answer, or None if the child died; the model it was running last; its exit code)."""
    proc = subprocess.Popen([sys.executable, "-m", "eqsat.verification.isolate_child"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, PYTHONFAULTHANDLER=""))
    try:
        out, err = proc.communicate(json.dumps(request).encode())
    finally:
        if proc.poll() is None:  # Ctrl-C or SIGTERM in the parent: the child goes too
            proc.kill()
            proc.wait()
    last, edge = None, ""
    for line in out.decode(errors="replace").splitlines():
        if line.startswith("@result "):
            return json.loads(line[len("@result "):]), last, proc.returncode
        if line.startswith("@edge "):
            edge = "edge:"
        if line.startswith(("@load ", "@run ")):
            last = edge + line.split(" ", 1)[1]
    if proc.returncode >= 0:  # it exited without an answer: an error of eqsat's own
        lines = [ln for ln in err.decode(errors="replace").splitlines() if ln.strip()]
        raise EqsatError(f"verification stopped: {lines[-1] if lines else f'exit code {proc.returncode}'}")
    return None, last, proc.returncode


def _signal(code: int) -> str:
    try:
        return f"signal {-code}, {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"

