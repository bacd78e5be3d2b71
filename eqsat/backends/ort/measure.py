"""Measured op costs: each distinct (op, attributes, input shapes and dtypes) of an e-graph
timed once on onnxruntime, the results cached on disk.

`annotate(data, ...)` adds `eqsat.measured_us` (e-node id -> microseconds) to a serialized
e-graph; extract's `measured` cost model reads it, so a saved e-graph carries its
measurements and the extractors need nothing else. A node is timed as a one-node model:
its non-constant inputs are graph inputs with random values of their shapes (symbolic
dimensions bound by `dims`, else 16), its constant inputs initializers (so onnxruntime can
pre-pack weights, as it does in the full model). Median of `runs` timed runs after warm-up,
one thread, onnxruntime's own graph optimizations off: the op is timed as written (with them
on, onnxruntime would run an NCHW Conv as its own blocked one, and BatchNormalization fused
away, so the layouts and fusions eqsat chooses between would time alike). A node that cannot
be built or run gets no measurement (the cost model then falls back to the roofline estimate
for it).

The cache ($EQSAT_CACHE/measured.json, by default ~/.cache/eqsat) is keyed by the one-node
model and by what its time depends on besides: onnxruntime's version and the CPU
(`machine_salt`), so a home folder shared by machines, or an upgraded onnxruntime, times
afresh rather than reusing another's figures. A cache file that is not one (corrupt,
unreadable, another program's) is ignored with a warning and rebuilt (read_cache).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from onnx import ModelProto, helper

from eqsat.core.decode import Decoder
from eqsat.core.shapes import is_symbol
from eqsat.core.store import ProtoStore, TensorStore
from eqsat.environment import cache_folder
from eqsat.extract.costs.base import STRUCTURE
from eqsat.extract.egraph import EGraph, Node
from eqsat.lang.dtypes import CTOR_TO_CODE, np_dtype
from eqsat.lang.ops import LITERAL_CTORS
from eqsat.verification import session

DEFAULT_DIM = 16
KEY_SALT = b"ort-optimizations-off\0"  # cache entries timed with them on (before) do not match
DEFAULT_CACHE = "default"  # Measurer(cache=...): cache_file(), from the environment


def cache_file() -> Path | None:
    """$EQSAT_CACHE/measured.json, by default ~/.cache/eqsat/measured.json (None where there
    is no home folder); a bad EQSAT_CACHE is a UsageError (eqsat.environment)."""
    folder = cache_folder()
    return None if folder is None else folder / "measured.json"


def read_cache(path: Path) -> dict[str, float | None]:
    """The cache's entries (key -> microseconds >= 0, or None: the op could not be run
    alone). A file that cannot be read or is not a cache (not JSON, not an object, an entry
    that is not a number >= 0 or null) is ignored with a warning on stderr, and rebuilt:
    written again with this run's measurements (it holds nothing that cannot be measured
    again). Where the path is a folder or other non-file, nothing is cached."""
    if not path.exists():
        return {}
    if not path.is_file():
        _warn(f"{path} is not a file; measurements are not cached this run")
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        why = f"cannot read it ({e})" if isinstance(e, OSError) else "not JSON"
        _warn(f"{path}: {why}; ignored, and rebuilt with this run's measurements")
        return {}
    bad = None if isinstance(data, dict) else "not a JSON object"
    for k, v in data.items() if bad is None else ():
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf):
            bad = f"entry {json.dumps(k)} is {json.dumps(v)}, not a time in microseconds"
            break
    if bad:
        _warn(f"{path}: not a measurement cache ({bad}); ignored, and rebuilt with this run's measurements")
        return {}
    return data


def _warn(message: str) -> None:
    print(f"eqsat: warning: {message}", file=sys.stderr)


@functools.cache
def machine_salt() -> bytes:
    """What a cached time depends on besides the op: onnxruntime's version, the architecture,
    the CPU's model name, family, model number and instruction-set flags (Linux's
    /proc/cpuinfo; elsewhere platform.processor())."""
    import onnxruntime

    cpu = platform.processor()
    try:
        info = Path("/proc/cpuinfo").read_text(errors="replace")
        fields = dict(line.split(":", 1) for line in info.splitlines()[:40] if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        cpu = "|".join(fields.get(k, "") for k in ("model name", "cpu family", "model", "flags", "Features"))
    except OSError:
        pass
    return f"onnxruntime {onnxruntime.__version__}\0{platform.machine()}\0{cpu}\0".encode()


class Measurer:
    def __init__(self, model: ModelProto, tensors: TensorStore, protos: ProtoStore, dims: dict[str, int] | None = None,
                 runs: int = 20, cache: Path | str | None = DEFAULT_CACHE) -> None:
        """`cache`: the cache file (read_cache), None for none, DEFAULT_CACHE for cache_file()."""
        self.model = model
        self.tensors = tensors
        self.protos = protos
        self.dims = dict(dims or {})
        self.runs = runs
        if cache == DEFAULT_CACHE:
            cache = cache_file()
        self.cache_path = None if cache is None else Path(cache)
        self.cache: dict[str, float | None] = {}
        if self.cache_path is not None:
            self.cache = read_cache(self.cache_path)
            if self.cache_path.exists() and not self.cache_path.is_file():
                self.cache_path = None
        self.timed = 0

    def annotate(self, data: dict) -> dict:
        eg = EGraph.from_json(data)
        names = {int(k): v for k, v in data.get("eqsat", {}).get("dims", {}).items()}
        out: dict[str, float] = {}
        for node in eg.nodes.values():
            if not self._is_op(eg, node):
                continue
            built = self._one_node_model(eg, node, names)
            if built is None:
                continue
            model, feeds = built
            salted = KEY_SALT + machine_salt() + model.SerializeToString(deterministic=True)
            key = hashlib.sha256(salted).hexdigest()[:24]
            if key not in self.cache:
                self.cache[key] = self._time(model, feeds)
                self.timed += 1
            if self.cache[key] is not None:
                out[node.id] = self.cache[key]
        data.setdefault("eqsat", {})["measured_us"] = out
        self._save()
        return data

    @staticmethod
    def _is_op(eg: EGraph, node: Node) -> bool:
        return (not node.id.startswith("primitive-") and node.op not in STRUCTURE
                and eg.class_type(node.eclass) in ("Op", "") and node.op != "If")

    def _shape(self, eg: EGraph, eclass: str, names: dict[int, str]) -> list[int] | None:
        s = eg.class_data.get(eclass, {}).get("shape")
        if s is None:
            return None
        return [d if d >= 0 else self.dims.get(names.get(d, ""), DEFAULT_DIM) if is_symbol(d) else None for d in s]

    def _one_node_model(self, eg: EGraph, node: Node, names: dict[int, str]):
        """The node alone: a copy of the e-graph where each non-constant Op child is a fresh
        graph input; decoded with the regular decoder."""
        nodes = dict(eg.nodes)
        classes = {c: list(v) for c, v in eg.classes.items()}
        choice = _FirstNode(classes)
        inputs, feeds = [], {}
        new_children = []
        rng = np.random.default_rng(0)
        for k in node.children:
            members = [eg.nodes[n] for n in eg.classes.get(k, ())]
            const = next((n for n in members if n.op in LITERAL_CTORS or n.op == "Absent"), None)
            if eg.class_type(k) != "Op" or const is not None:
                new_children.append(k)
                if const is not None:
                    choice[k] = const.id
                continue
            if not members:
                return None
            shape, dt = self._shape(eg, k, names), eg.class_data.get(k, {}).get("dtype")
            if shape is None or None in shape or dt not in CTOR_TO_CODE:
                return None
            name = f"in{len(inputs)}"
            cid, sid, nid = f"m-{name}", f"m-{name}-s", f"m-{name}-n"
            nodes[sid] = Node(sid, json.dumps(name), sid, ())
            classes[sid] = [sid]
            nodes[nid] = Node(nid, "Input", cid, (sid,))
            classes[cid] = [nid]
            new_children.append(cid)
            code = CTOR_TO_CODE[dt]
            inputs.append(helper.make_tensor_value_info(name, code, shape))
            arr = rng.standard_normal(shape) if np.issubdtype(np_dtype(code),
                                                              np.floating) else rng.integers(0, 2, shape)
            feeds[name] = np.asarray(arr).astype(np_dtype(code))
        if any(eg.class_type(k) == "OpList" for k in node.children):
            return None  # variadic ops (Concat, Sum): not measured alone
        target = Node("m-target", node.op, "m-root", tuple(new_children))
        nodes[target.id] = target
        classes["m-root"] = [target.id]
        class_data = dict(eg.class_data)
        for c in list(classes):
            if c.startswith("m-") and c.endswith("-s"):
                class_data[c] = {"type": "String"}
            elif c.startswith("m-"):
                class_data[c] = {"type": "Op"}
        choice["m-root"] = target.id
        full = EGraph(nodes, classes, ["m-root"], class_data, eg.meta)
        m = ModelProto()
        m.ir_version = max(self.model.ir_version, 8)
        m.opset_import.extend(self.model.opset_import)
        m.graph.input.extend(inputs)
        m.graph.output.append(helper.make_empty_tensor_value_info("out"))
        try:
            model = Decoder(m, full, choice, self.tensors, self.protos, {}).decode(["m-root"])
        except Exception:  # noqa: BLE001 - an op we cannot build alone
            return None
        out_shape = self._shape(eg, node.eclass, names)
        out_dt = eg.class_data.get(node.eclass, {}).get("dtype")
        if out_dt not in CTOR_TO_CODE:
            return None
        del model.graph.output[:]
        model.graph.output.append(helper.make_tensor_value_info("out", CTOR_TO_CODE[out_dt], out_shape))
        return model, feeds

    def _time(self, model: ModelProto, feeds: dict) -> float | None:
        try:
            sess = session(model, optimize=False, threads=1)
            for _ in range(3):
                sess.run(None, feeds)
            ts = []
            for _ in range(self.runs):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                ts.append(time.perf_counter() - t0)
            return round(statistics.median(ts) * 1e6, 3)
        except Exception:  # noqa: BLE001 - onnxruntime cannot run it alone
            return None

    def _save(self) -> None:
        if self.cache_path is None:
            return
        try:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_path.with_suffix(f".{os.getpid()}.tmp")  # two processes never share one
            tmp.write_text(json.dumps(self.cache))
            os.replace(tmp, self.cache_path)
        except OSError:
            pass


class _FirstNode(dict):
    """A choice that defaults to an e-class's first node (attribute values have one)."""

    def __init__(self, classes: dict[str, list[str]]) -> None:
        super().__init__()
        self.classes = classes

    def __missing__(self, eclass: str) -> str:
        return self.classes[eclass][0]
