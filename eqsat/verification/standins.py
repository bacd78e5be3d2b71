"""Running a model that onnxruntime cannot run whole: the nodes it cannot run get stand-ins.

A node onnxruntime cannot run (an op of a domain it does not know, or a call of a local
function or a subgraph that holds one) or must not run (a random node, eqsat.core.randomness) is
cut out; the model runs under onnxruntime in stages between such nodes, and each cut node's
outputs are made in Python:
- a pure node's outputs are a function of its domain, op type, attributes, its inputs'
  types and shapes, and its input values only, so a node computed twice, or merged with its
  twin, gives the same values in any model, as the optimizer assumes. A floating-point
  output is a fixed random tensor (seeded by the rest) plus tanh of a random projection of
  the input values: continuous in them, so inputs a rewrite moved within the tolerance move
  the outputs as little, and inputs it got wrong move them more. An integer output is 0s
  and 1s (valid indices) that do not depend on the values, and so check nothing of them;
- a random node's outputs are a function of its key: its first output's name, which the
  optimized model maps back to the original's (`Result.random_pairs`), so each random node
  is fed the same draw in both models and two random nodes never share one (plus, where
  the op's result depends on its input values, the projection of those).
An output's type and shape come from shape inference where it knows them (symbolic sizes
bound from the run), else from the node's first input. What is verified this way is
everything the models compute around the cut nodes, not the cut nodes themselves: their
outputs, and what they are fed (`StagedRunner.cut_inputs`, which verification compares: a
stand-in's floats saturate with large inputs and its integers ignore them, so a wrong value
fed to a cut node could leave every output as it was).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, helper

from eqsat.backends.ort.sessions import session
from eqsat.core.randomness import RandomNodes
from eqsat.core.scopes import implicit_inputs, subgraphs
from eqsat.core.shapes import infer_types
from eqsat.errors import EqsatError
from eqsat.io import external
from eqsat.io.modelio import model_shell
from eqsat.lang.dtypes import np_dtype

# the domains onnxruntime's CPU build has kernels or function bodies for
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "com.microsoft.nchwc",
                           "com.microsoft.experimental", "ai.onnx.preview.training", "ai.onnx.training",
                           "com.ms.internal.nhwc", "org.pytorch.aten"})


class StandInError(EqsatError):
    """A cut node's outputs cannot be made (their type is unknown and there is no input to
    take it from), or a stage does not run."""


def _domain(n: NodeProto) -> str:
    return "" if n.domain == "ai.onnx" else n.domain


class CutNodes:
    """Which nodes of a model are cut: random, or not runnable by onnxruntime."""

    def __init__(self, model: ModelProto) -> None:
        self.random = RandomNodes(model)
        local = {(f.domain, f.name): f for f in model.functions}
        self.bad_functions: set[tuple[str, str]] = set()
        changed = True
        while changed:  # a function that calls one that cannot run cannot run either
            changed = False
            for key, f in local.items():
                if key not in self.bad_functions and any(self._unknown(n, local) for n in f.node):
                    self.bad_functions.add(key)
                    changed = True
        self.local = local

    def _unknown(self, n: NodeProto, local) -> bool:
        key = (n.domain, n.op_type)
        if key in local:
            return key in self.bad_functions
        if _domain(n) not in KNOWN_DOMAINS:
            return True
        return any(self._unknown(m, local) for a in n.attribute for sub in subgraphs(a) for m in sub.node)

    def why(self, n: NodeProto) -> str | None:
        """Why `n` is cut ("random" or "not runnable"), or None."""
        if self.random.why(n):
            return "random"
        if self._unknown(n, self.local):
            return "not runnable"
        return None


@dataclass
class Stage:
    nodes: list[NodeProto]  # runnable nodes, in order
    cut: list[NodeProto]  # cut nodes that run after them


class StagedRunner:
    """Runs `model` in stages with stand-ins for its cut nodes (see the module's contract).
    `keys` maps a random node's first output name to the key its draw is made from (default:
    the name itself)."""

    def __init__(self, model: ModelProto, keys: dict[str, str] | None = None, optimize: bool = True,
                 reference: StagedRunner | None = None) -> None:
        self.model = model
        self.reference = reference  # the original's runner, run last on the same feeds (see `_stand_in`)
        self.keys = keys or {}
        self.optimize = optimize  # onnxruntime's graph optimizations on the stages (eqsat.verification)
        cuts = CutNodes(model)
        self.nodes = list(model.graph.node)  # held: the cut kinds below are keyed by these objects
        self.kind = {id(n): why for n in self.nodes if (why := cuts.why(n))}
        self.types, _ = infer_types(model, declared=True)  # a custom op's output type is only declared
        self.stages = self._stages()
        # what the last `run` fed each cut node and gave it, in graph order: (label, key, inputs,
        # outputs), the key that of its stand-in (equal ops of equal input types and shapes, or a
        # random node and its twin, have equal keys); eqsat.verification compares the inputs
        # between two models
        self.cut_inputs: list[tuple[str, int, list[np.ndarray | None], list[np.ndarray | None]]] = []

    def cut_summary(self) -> Counter:
        """'domain.op_type' -> how many nodes of it are cut."""
        return Counter((f"{n.domain}." if _domain(n) else "") + n.op_type
                       for n in self.nodes if id(n) in self.kind)

    def _stages(self) -> list[Stage]:
        level: dict[str, int] = {}
        stages: list[Stage] = []

        def at(k: int) -> Stage:
            while len(stages) <= k:
                stages.append(Stage([], []))
            return stages[k]

        for n in self.nodes:
            ins = [i for i in [*n.input, *implicit_inputs(n)] if i]
            lv = max((level.get(i, 0) for i in ins), default=0)
            if id(n) in self.kind:
                at(lv).cut.append(n)
                out_level = lv + 1
            else:
                at(lv).nodes.append(n)
                out_level = lv
            for o in n.output:
                if o:
                    level[o] = out_level
        return stages or [Stage([], [])]

    def run(self, feeds: dict[str, np.ndarray], sizes: dict[str, int] | None = None) -> dict[str, object]:
        """The graph outputs, by name, for `feeds`."""
        sizes = sizes or {}
        g = self.model.graph
        inits = {t.name: t for t in g.initializer}
        values: dict[str, object] = dict(feeds)  # an initializer not fed stays in the stage models
        outputs = [o.name for o in g.output]
        self.cut_inputs = []
        for k, stage in enumerate(self.stages):
            if stage.nodes:
                need = self._used_later(k + 1) | {i for n in stage.cut for i in [*n.input, *implicit_inputs(n)] if i}
                need |= set(outputs)
                produced = [o for n in stage.nodes for o in n.output if o]
                wanted = [o for o in dict.fromkeys(produced) if o in need]
                if wanted:
                    sub = self._stage_model(stage.nodes, values, wanted, inits)
                    try:
                        sess = session(sub, self.optimize)
                        got = sess.run(wanted, {i.name: np.asarray(values[i.name]) for i in sub.graph.input})
                    except Exception as e:  # noqa: BLE001 - onnxruntime's reason, one line
                        raise StandInError(f"onnxruntime cannot run the part of the model between the cut "
                                           f"nodes: {' '.join(str(e).split())[:240]}") from None
                    values.update(zip(wanted, got, strict=True))
            for n in stage.cut:
                for name, value in zip(n.output, self._stand_in(n, values, inits, sizes), strict=True):
                    if name:
                        values[name] = value
        return {o: values[o] if values.get(o) is not None else _initializer(inits[o]) for o in outputs}

    def _used_later(self, k: int) -> set[str]:
        out: set[str] = set()
        for stage in self.stages[k:]:
            for n in [*stage.nodes, *stage.cut]:
                out.update(i for i in [*n.input, *implicit_inputs(n)] if i)
        return out

    def _stage_model(self, nodes: list[NodeProto], values: dict[str, object], wanted: list[str],
                     inits: dict) -> ModelProto:
        m = model_shell(self.model)
        sg = m.graph
        sg.name = "stage"
        defined = {o for n in nodes for o in n.output if o}
        reads = [i for n in nodes for i in [*n.input, *implicit_inputs(n)] if i and i not in defined]
        for name in dict.fromkeys(reads):
            if name in inits and values.get(name) is None:
                sg.initializer.append(inits[name])
                continue
            arr = np.asarray(values[name])
            sg.input.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
        sg.node.extend(nodes)
        sg.output.extend(helper.make_empty_tensor_value_info(o) for o in wanted)
        return m

    def _stand_in(self, n: NodeProto, values: dict[str, object], inits: dict,
                  sizes: dict[str, int]) -> list[np.ndarray | None]:
        """The cut node's outputs (see the module's contract)."""
        inputs: list[np.ndarray | None] = []
        for i in n.input:
            if i and values.get(i) is not None:
                inputs.append(np.asarray(values[i]))
            elif i in inits:  # by value: the optimized model may name (or fold) a weight otherwise
                t = inits[i]
                inputs.append(external.read(t) if external.is_external(t) else onnx.numpy_helper.to_array(t))
            else:
                inputs.append(None)
        random = self.kind[id(n)] == "random"
        h = hashlib.blake2b(digest_size=8)
        if random:
            h.update(b"random\0" + self.keys.get(n.output[0], n.output[0]).encode())
        else:
            h.update(f"{n.domain}\0{n.op_type}\0".encode())
            for a in sorted(n.attribute, key=lambda a: a.name):
                value = a.name if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) else \
                    repr(helper.get_attribute_value(a))
                h.update(f"{a.name}={value}\0".encode())
            for x in inputs:
                h.update(b"-" if x is None else f"{x.dtype}{x.shape}\0".encode())
        key = int.from_bytes(h.digest(), "little")
        label = (f"{n.domain}." if _domain(n) else "") + n.op_type
        if not random and self.reference is not None:  # the optimized model: its match's outputs
            same = [r for r in self.reference.cut_inputs if r[1] == key and len(r[2]) == len(inputs)
                    and len(r[3]) == len(n.output)]
            if same:
                best = min(same, key=lambda r: distance(inputs, r[2]))
                out = [None if v is None else np.array(v, copy=True) for v in best[3]]
                self.cut_inputs.append((label, key, inputs, out))
                return out
        # nodes of one key fed other values get other draws (group: which of the distinct inputs
        # of this key so far), so that a rewrite feeding one node another's inputs shows even
        # where the projection saturates or the outputs are integers
        groups = [r for r in self.cut_inputs if r[1] == key]
        group = next((g for g, r in enumerate(groups) if distance(inputs, r[2]) == 0.0), len(groups))
        # how the values enter: a random projection, continuous in them (a rewrite that moves
        # an input by its last bits moves the outputs as little); a random op's Like form only
        # takes its input's shape
        depends = not random or n.op_type not in ("RandomNormalLike", "RandomUniformLike")
        s = _projection(inputs, key) if depends else 0.0
        out = []
        for k, name in enumerate(n.output):
            if not name:
                out.append(None)
                continue
            dtype, shape = self._type(n, name, inputs, sizes)
            rng = np.random.default_rng(key + k + GROUP_SEED * group)
            if dtype == np.bool_:
                out.append(np.asarray(rng.random(shape) < 0.5))
            elif np.issubdtype(dtype, np.integer):  # a value onnxruntime may index with: 0 or 1
                out.append(rng.integers(0, 2, size=shape).astype(dtype))
            else:
                out.append((rng.standard_normal(shape) + np.tanh(s)).astype(dtype))
        self.cut_inputs.append((label, key, inputs, out))
        return out

    def _type(self, n: NodeProto, name: str, inputs: list[np.ndarray | None], sizes: dict[str, int]
              ) -> tuple[np.dtype, list[int]]:
        first = next((x for x in inputs if x is not None), None)
        t = self.types.get(name)
        dtype = np.dtype(np_dtype(t.elem)) if t is not None and t.elem else (first.dtype if first is not None else None)
        if dtype is None:
            raise StandInError(f"the output '{name}' of {n.domain}.{n.op_type} has no known type to feed")
        if t is not None and t.dims is not None:
            dims = []
            for i, d in enumerate(t.dims):
                if isinstance(d, int):
                    dims.append(d)
                elif isinstance(d, str) and d in sizes:
                    dims.append(sizes[d])
                elif first is not None and first.ndim == len(t.dims):
                    dims.append(first.shape[i])
                else:
                    raise StandInError(f"the output '{name}' of {n.domain}.{n.op_type} has a size that is not known")
            return dtype, dims
        if first is None:
            raise StandInError(f"the output '{name}' of {n.domain}.{n.op_type} has no known shape to feed")
        return dtype, list(first.shape)


def _initializer(t) -> np.ndarray:
    return onnx.numpy_helper.to_array(t)


GROUP_SEED = 1_000_003  # a draw's seed moves by this per group of distinct inputs (`StagedRunner._stand_in`)


def distance(a: list[np.ndarray | None], b: list[np.ndarray | None]) -> float:
    """How far apart two cut nodes' inputs are: the largest absolute difference of their
    values (0 where both are NaN; inf where the values cannot be compared)."""
    if len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            if x is not y:
                return float("inf")
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return float("inf")
        if x.dtype.kind not in "biufc":
            if not np.array_equal(x, y):
                return float("inf")
            continue
        xf, yf = np.atleast_1d(x.astype(np.float64)), np.atleast_1d(y.astype(np.float64))
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.abs(xf - yf)
        d[np.isnan(xf) & np.isnan(yf)] = 0.0
        d[np.isnan(d)] = np.inf
        worst = max(worst, float(d.max()) if d.size else 0.0)
    return worst


PROJECTION_MAX = 1 << 20  # elements of an input the projection reads (evenly spaced beyond)


def _projection(inputs: list[np.ndarray | None], key: int) -> float:
    """A number that depends continuously on the inputs' values: the mean of each numeric
    input times fixed random weights (seeded by `key`), summed over the inputs."""
    total = 0.0
    for i, x in enumerate(inputs):
        if x is None or x.dtype == object or x.size == 0:
            continue
        flat = x.reshape(-1)
        if flat.size > PROJECTION_MAX:
            flat = flat[:: -(-flat.size // PROJECTION_MAX)]
        w = np.random.default_rng(key + 1000 + i).standard_normal(flat.size)
        with np.errstate(all="ignore"):
            total += float(np.dot(flat.astype(np.float64), w)) / np.sqrt(flat.size)
    return total
