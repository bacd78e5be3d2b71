"""The child process of eqsat.verification.isolate, `python -m eqsat.verification.isolate_child`: it reads one JSON
request on stdin, runs it, and prints on stdout one line per step ("@load original", "@run
optimized", "@edge ...", "@run K") before the step is taken, then "@result " and the answer
as JSON.

A request is either {"probe": [model files], "feeds": an .npz file}: each model run once on
the feeds, onnxruntime's optimizations off, the answer {} (an error onnxruntime raises is the
caller's to report; only a crash, the child's death, is an answer of its own); or a
verification, {"original", "optimized", "runs", "rtol", "atol", "dims", "random_pairs",
"narrow", "edges"}: eqsat.verification.verify of the two model files, integers drawn 0 or 1
when "narrow", without the edge-case runs unless "edges", the answer the Verification's
fields. Apart from eqsat.verification.isolate, which imports no verification: eqsat.verification imports
eqsat.verification.isolate, and this module eqsat.verification.
"""

from __future__ import annotations

import json
import sys

from eqsat import verification as V
from eqsat.io.modelio import read_model


def _main() -> int:
    """Answer the request on stdin (see the module docstring); the exit code."""
    req = json.loads(sys.stdin.read())

    def announce(step: str) -> None:
        print(f"@{step}", flush=True)

    if "probe" in req:
        import numpy as np

        with np.load(req["feeds"], allow_pickle=False) as npz:
            feeds = {k: npz[k] for k in npz.files}
        for k, path in enumerate(req["probe"]):
            announce(f"run {k}")
            try:
                V.session(path, optimize=False).run(None, feeds)
            except Exception:  # noqa: BLE001 - an error is the caller's to report; only a crash is ours
                pass
        print("@result {}", flush=True)
        return 0

    V.announce = announce
    if req["narrow"]:
        V.WIDE_INTEGERS = False
    if not req.get("edges", True):
        V.EDGE_CASES = False
    original = read_model(req["original"])[0]
    optimized = read_model(req["optimized"])[0]
    v = V.verify(original, optimized, req["runs"], req["rtol"], req["atol"], req["dims"],
                 (req["original"], req["optimized"]), req["random_pairs"])
    print("@result " + json.dumps(v.__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
