"""Element types, static shapes and byte sizes of every intermediate tensor.

Shapes come from ONNX shape inference (`onnx.shape_inference.infer_shapes(...,
data_prop=True)`) on a copy of the model whose symbolic input dimensions are bound to the
sizes the user gives (`dims={"batch": 8}`). Every symbolic dimension of a graph input must
be bound: an unbound one is a UsageError naming it. Dimensions given but not used are
ignored.

ONNX shape inference does not know onnxruntime's contrib ops (com.microsoft.FusedConv,
SkipLayerNormalization, ...) and cannot follow every shape computation (a Range whose limit
comes from a Shape, a Slice with computed ends, ...). The tensors it leaves without a static
shape are measured instead: the model runs once under onnxruntime (graph optimizations off,
so every value keeps its name) on random inputs at the bound dimensions, with those tensors
as extra outputs. Their `shape_source` is then `run`. A data-dependent shape (NonZero,
Unique, ...) measured that way holds for those inputs only. The same run checks the shapes
inference gives (every intermediate, where they fit in a CHECK_FRACTION of the memory and
onnxruntime runs the model): onnx's inference and onnxruntime disagree on some ops, and
where they do, the run's shape is the tensor's (`shape_source` `run`).

A tensor's size is its element count times the element size numpy uses for its type (one
byte for bool; sub-byte types such as int4 take one byte per element, as numpy holds them).
String tensors and non-tensor values (sequences, maps, optionals) cannot live in a byte
arena: the planner refuses them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import ModelProto, TensorProto, helper

from eqsat.core import native
from eqsat.errors import InvalidModelError, UsageError
from eqsat.plan.errors import PlanError


@dataclass(frozen=True)
class TensorType:
    elem_type: int
    shape: tuple[int, ...]
    size: int
    source: str  # inferred | run


def itemsize(elem_type: int) -> int:
    if elem_type == TensorProto.STRING:
        raise PlanError("string tensors cannot be placed in a byte arena")
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize


def np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def _size(name: str, value: object) -> int:
    """A dimension's size as given: an integer >= 0 (eqsat.plan(dims={"N": 2.5}) was planned
    for N = 2, and True for N = 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise UsageError(f"dimension '{name}': size {value!r} is not an integer >= 0")
    return int(value)


def input_dims(model: ModelProto, dims: dict[str, int]) -> dict[str, int]:
    """The symbolic dimensions of the graph inputs, bound from `dims`; raises UsageError for
    the first one that is not bound (or for a dimension with neither name nor size)."""
    inits = {t.name for t in model.graph.initializer}
    used: dict[str, int] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            raise PlanError(f"input '{vi.name}' is not a tensor: the planner handles tensor graphs only")
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise UsageError(f"input '{vi.name}' has no shape: the planner needs static shapes")
        for axis, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                continue
            if d.HasField("dim_param") and d.dim_param:
                name = d.dim_param
                if name not in dims:
                    raise UsageError(f"dimension '{name}' is symbolic: give its size with --dim {name}=N")
                used[name] = _size(name, dims[name])
            else:
                raise UsageError(
                    f"input '{vi.name}' has a dimension without name or size (axis {axis}): "
                    "the planner needs static shapes"
                )
    for vi, default in _overridable(model):
        for d, n in zip(_dims_of(vi), default, strict=False):
            if d.HasField("dim_param") and d.dim_param and d.dim_param not in used:
                name = d.dim_param
                used[name] = _size(name, dims[name]) if name in dims else n
    return used


def _dims_of(vi: onnx.ValueInfoProto) -> list:
    tt = vi.type.tensor_type
    return list(tt.shape.dim) if vi.type.HasField("tensor_type") and tt.HasField("shape") else []


def _overridable(model: ModelProto) -> list[tuple[onnx.ValueInfoProto, tuple[int, ...]]]:
    """The overridable inputs (an initializer is their default) with their defaults' dims."""
    from eqsat.core.initializers import overridable_inputs

    free = overridable_inputs(model)
    defaults = {t.name: tuple(int(d) for d in t.dims) for t in model.graph.initializer if t.name in free}
    return [(vi, defaults[vi.name]) for vi in model.graph.input if vi.name in defaults]


def overridable_shapes(model: ModelProto, dims: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The shape each overridable input is planned for: its declared dimensions, a symbolic
    one bound by `dims` (input_dims binds one not given to the default's), an unknown one
    (or an undeclared shape) the default's. A caller may feed another shape than the
    default's: Concat(x, w) with w declared float[K] was sized by w's default even where
    K was given."""
    out: dict[str, tuple[int, ...]] = {}
    for vi, default in _overridable(model):
        declared = _dims_of(vi)
        if len(declared) != len(default):
            out[vi.name] = default
            continue
        out[vi.name] = tuple(int(d.dim_value) if d.HasField("dim_value") else
                             int(dims[d.dim_param]) if d.HasField("dim_param") and d.dim_param in dims else n
                             for d, n in zip(declared, default, strict=True))
    return out


# domains whose ops onnx's shape inference or onnxruntime's run size (com.microsoft.* too:
# com.microsoft.nchwc, ...); any other domain's outputs (a custom op's) are sized by their
# declarations alone
KNOWN_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})


def _known_domain(domain: str) -> bool:
    return domain in KNOWN_DOMAINS or domain.startswith("com.microsoft.")


def _declared_only(model: ModelProto) -> set[str]:
    """Outputs of the nodes of the main graph that nothing but a declaration sizes: those of
    custom-domain ops that are not model-local functions."""
    local = {(f.domain, f.name) for f in model.functions}
    return {y for n in model.graph.node if not _known_domain(n.domain) and (n.domain, n.op_type) not in local
            for y in n.output if y}


def _bind(model: ModelProto, dims: dict[str, int], free: dict[str, tuple[int, ...]]) -> ModelProto:
    """A skeleton for inference with `dims` bound. A declared type (value_info, a graph
    output's) is kept only for a custom op's output: elsewhere it may lie (onnxruntime only
    warns), and onnx's inference keeps a declared float[1] of Relu(x[4]), which sized r 4
    bytes in the arena."""
    from eqsat.core.shapes import _skeleton  # a copy without the data of large initializers

    sk = _skeleton(model, declared=True)
    g = sk.graph
    keep = _declared_only(model)
    vis = [vi for vi in g.value_info if vi.name in keep]
    del g.value_info[:]
    g.value_info.extend(vis)
    for o in g.output:
        if o.name not in keep:
            o.ClearField("type")
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in dims:
                    d.dim_value = int(dims[d.dim_param])
    for vi in g.input:  # an overridable input, the shape it is planned for (`free`)
        if vi.name in free and vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
            for n in free[vi.name]:
                vi.type.tensor_type.shape.dim.add().dim_value = n
    return sk


def _static(vi: onnx.ValueInfoProto) -> tuple[int, tuple[int, ...]] | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.elem_type or not tt.HasField("shape"):
        return None
    shape = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        shape.append(int(d.dim_value))
    return int(tt.elem_type), tuple(shape)


def tensor_types(model: ModelProto, dims: dict[str, int]) -> tuple[dict[str, TensorType], dict[str, int]]:
    """Types of every node output of the main graph. Returns (types, the dims used)."""
    used = input_dims(model, dims)
    free = overridable_shapes(model, used)
    sk = _bind(model, used, free)
    try:
        inferred = native.infer_shapes(sk, check_type=False, strict_mode=False, data_prop=True)
        g = inferred.graph
    except InvalidModelError:
        raise
    except Exception:  # noqa: BLE001 - inference is best effort; the run below measures the rest
        g = sk.graph
    known: dict[str, tuple[int, tuple[int, ...]]] = {}
    produced = [(n, y) for n in model.graph.node for y in n.output if y]
    names = {y for _, y in produced}
    for vi in [*g.value_info, *g.output]:
        kind = vi.type.WhichOneof("value")
        if vi.name in names and kind not in (None, "tensor_type"):  # onnxruntime hands an optional's tensor over
            raise PlanError(f"'{vi.name}' is not a tensor ({kind.removesuffix('_type')}): the planner handles "
                            "tensor graphs only")
        s = _static(vi)
        if s is not None:
            known[vi.name] = s
    missing = [y for _, y in produced if y not in known]
    types: dict[str, TensorType] = {}
    for name, (elem, shape) in _measured(model, [y for _, y in produced], missing, known, used).items():
        if name in missing or known[name] != (elem, shape):
            types[name] = _make(name, elem, shape, "run")
    for n, y in produced:
        if y not in types:
            if y not in known:
                raise PlanError(f"no static shape for '{y}' (output of {n.op_type} node '{n.name}')")
            elem, shape = known[y]
            types[y] = _make(y, elem, shape, "inferred")
    return types, used


def _make(name: str, elem: int, shape: tuple[int, ...], source: str) -> TensorType:
    if elem == TensorProto.STRING:
        raise PlanError(f"'{name}' is a string tensor: a byte arena holds fixed-size elements only")
    return TensorType(elem, shape, math.prod(shape) * itemsize(elem), source)


def plan_feeds(model: ModelProto, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """Random inputs at `dims` (eqsat.verification.random_inputs: overridable inputs get their
    defaults), and random values for an overridable input planned for another shape than
    its default's (overridable_shapes)."""
    from eqsat.verification import random_inputs

    feeds = random_inputs(model, dims)  # refuses inputs larger than half the machine's memory
    free = overridable_shapes(model, dims)
    rng = np.random.default_rng(0)
    for t in model.graph.initializer:
        shape = free.get(t.name)
        if shape is not None and shape != tuple(t.dims):
            dt = np_dtype(t.data_type)
            v = rng.standard_normal(shape) if dt.kind in "fc" else rng.integers(0, 2, size=shape)
            feeds[t.name] = v.astype(dt)
    return feeds


# the most bytes of intermediates `_measured` has onnxruntime return at once to check the
# inferred shapes (a fraction of the machine's memory)
CHECK_FRACTION = 8


Types = dict[str, tuple[int, tuple[int, ...]]]  # name -> (element type, shape)


def _measured(model: ModelProto, produced: list[str], missing: list[str], known: Types, dims: dict[str, int]) -> Types:
    """The types onnxruntime gives `missing` (those shape inference leaves unknown) and, where
    it runs the model and the inferred sizes fit in a CHECK_FRACTION of the memory, every
    other intermediate too: onnx's inference and onnxruntime disagree on some ops (a Slice
    to INT64_MAX with a negative step: onnx 0 elements, onnxruntime up to the whole axis; a
    pool with ceil_mode whose last window starts in the padding: onnxruntime drops it), and
    a plan sized by the inference alone put a tensor of 16 bytes in 0. A model onnxruntime cannot run keeps
    the inferred sizes where nothing is missing (else PlanError, as `_types_from_run`); one with
    a Div or Mod runs in a child process first (`_divides`), and where it crashes onnxruntime so too."""
    from eqsat.verification.feeds import _memory
    from eqsat.verification.isolate import probe

    inferred = sum(math.prod(shape) * _itemsize_or_0(elem) for elem, shape in known.values())
    if inferred > _memory() // CHECK_FRACTION:
        return _types_from_run(model, missing, dims) if missing else {}
    crash = None
    if _divides(model):  # an integer Div or Mod crashes onnxruntime (SIGFPE on INT64_MIN / -1), which would end
        try:  # eqsat: tried in a child process first (a child per plan costs about a second: where it can happen)
            crash = probe([model], plan_feeds(model, dims), ["the model"])
        except Exception:  # noqa: BLE001 - the inputs cannot be made: as a failed run below
            crash = None
    if crash:
        if missing:
            raise PlanError(f"shape inference leaves {len(missing)} tensor(s) without a static shape (first: "
                            f"'{missing[0]}') and the model cannot be run to measure them: {crash}")
        return {}
    try:
        return _types_from_run(model, produced, dims, missing)
    except Exception:  # noqa: BLE001 - not run (nor its inputs made): the inferred sizes, where they are all
        if missing:
            raise
        return {}


def _divides(model: ModelProto) -> bool:
    """Whether the model (its subgraphs too) holds a Div or Mod: onnxruntime's integer kernels
    die of SIGFPE on a division by zero or INT_MIN / -1."""
    from eqsat.core.scopes import all_graphs

    return any(n.op_type in ("Div", "Mod") for g in all_graphs(model.graph) for n in g.node)


def _itemsize_or_0(elem: int) -> int:
    try:
        return itemsize(elem)
    except (PlanError, TypeError, KeyError, ValueError):
        return 0


def _types_from_run(model: ModelProto, names: list[str], dims: dict[str, int],
                    missing: list[str] | None = None) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Measure the types of `names` by one onnxruntime run (graph optimizations off) on
    plan_feeds; a failure names `missing` (default: `names`), the tensors that needed it."""
    from eqsat.verification import session

    feeds = plan_feeds(model, dims)
    n_out = len(model.graph.output)
    have = {o.name for o in model.graph.output}
    extra = [x for x in names if x not in have]
    model.graph.output.extend(helper.make_empty_tensor_value_info(x) for x in extra)
    try:
        sess = session(model, optimize=False)
        got = sess.run(names, feeds)
    except Exception as e:  # noqa: BLE001 - any onnxruntime failure is reported with the tensors concerned
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        need = names if missing is None else missing
        raise PlanError(
            f"shape inference leaves {len(need)} tensor(s) without a static shape (first: '{need[0] if need else ''}') "
            f"and onnxruntime could not run the model to measure them: {first}"
        ) from None
    finally:
        del model.graph.output[n_out:]
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    for name, v in zip(names, got, strict=True):
        if not isinstance(v, np.ndarray):
            raise PlanError(f"'{name}' is not a tensor: the planner handles tensor graphs only")
        if v.dtype == object:
            raise PlanError(f"'{name}' is a string tensor: a byte arena holds fixed-size elements only")
        out[name] = (int(helper.np_dtype_to_tensor_dtype(v.dtype)), tuple(int(d) for d in v.shape))
    return out
