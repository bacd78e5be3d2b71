"""The two models of a verification run at the same time: while the original runs on some
inputs, the optimized model runs on the same inputs in a second thread, and the next request
for the optimized model's outputs on those inputs takes that result.

onnxruntime releases the GIL while a session runs and verification's sessions have one
intra-op thread each, so on a machine with two or more cores a random or edge run costs
about the time of the slower model instead of the sum. The results are those of running
them one after the other: each session runs alone on its inputs, with its own thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

Outputs = dict[str, object]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def alone(ref: Callable) -> Callable:
    """The original's runner for inputs the optimized model will not be run on (a nudged
    copy): a runner that starts the optimized model beside the original on the same inputs
    carries, as its `alone` attribute, one that does not; any other runner is its own."""
    return getattr(ref, "alone", ref)


class RunAhead:
    """`run(feeds)` of the optimized model, started by `start(feeds)` beside the original's run
    and taken by `take(feeds)` with the same feeds object (identity, not equality: a caller
    that draws new inputs gets a fresh run). Contract: `take` returns what `run(feeds)` returns
    or raises what it raises; at most one run is in flight (a `start` waits for the one before
    it, which nobody took: the original refused those inputs); with one core, `start` does
    nothing and `take` runs."""

    def __init__(self, run: Callable[[dict], Outputs], cores: int | None = None) -> None:
        self.run = run
        self.enabled = (cores if cores is not None else _cores()) > 1
        self._pending: tuple[dict, threading.Thread, dict] | None = None

    def start(self, feeds: dict) -> None:
        if not self.enabled:
            return
        self._drain()
        box: dict = {}

        def work() -> None:
            try:
                box["out"] = self.run(feeds)
            except BaseException as e:  # noqa: BLE001 - raised again by take
                box["error"] = e

        thread = threading.Thread(target=work, name="eqsat-verify-optimized", daemon=True)
        thread.start()
        self._pending = (feeds, thread, box)

    def take(self, feeds: dict) -> Outputs:
        pending, self._pending = self._pending, None
        if pending is None or pending[0] is not feeds:
            if pending is not None:
                pending[1].join()
            return self.run(feeds)
        pending[1].join()
        if "error" in pending[2]:
            raise pending[2]["error"]
        return pending[2]["out"]

    def _drain(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending[1].join()
