"""onnxruntime's symbolic shape inference, run so that what it claims holds.

Its `SymbolicShapeInference` (onnxruntime/tools/symbolic_shape_infer.py) guesses where sympy
cannot decide a comparison, and eqsat's rules take its shapes as facts:

- Slice: where it cannot decide whether an end lies within the dimension it "treats them as
  equal", and where it cannot decide whether an index is negative it takes it as not. The
  Slice's length is then a guess (Slice(u, 0, N) on 2 * ceiling(N / 2) elements: it claims
  2 * ceiling(N / 2), N + 1 where N is odd). `Sound` gives each axis of such a Slice a new
  symbolic size of its own, related to nothing.
- Conv and pooling with auto_pad SAME_UPPER / SAME_LOWER and a stride over a symbolic size:
  where it cannot decide the size's remainder by the stride it assumes none, floor(N / s).
  ONNX defines the size as ceiling(N / s) whatever the kernel; `Sound` gives that.

- auto_merge, which it needs where two symbolic sizes broadcast together, takes them to be
  equal though either may be 1. `infer` names the sizes merged into where that may be
  wrong: not where both are 1 together at every small value of their symbols
  (Min(128, sequence) and sequence are equal wherever they broadcast); `_unmerge` undoes
  those merges. A size computed at run time merged into a number stays assumed. A merge of
  two of the model's own named sizes refuses the whole inference.

`infer_model(model, plain)` is what eqsat.core.shapes uses: the whole of the above, on
onnxruntime's class loaded from its file (`load`). `infer(cls, model, auto_merge)` runs
`Sound` as `SymbolicShapeInference.infer_shapes` runs its own class, without the file it
saves into the working directory on incomplete inference.
"""

from __future__ import annotations

import functools
import itertools
import logging
import sys
from pathlib import Path

from onnx import GraphProto, ModelProto, helper

from eqsat.core.initializers import fixed_initializers
from eqsat.core.valuetype import type_of


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.n += 1


@functools.cache
def _sound_class(base: type) -> type:
    """`Sound`, the subclass of onnxruntime's inference class `base` described above (built
    once per class: it configures the module's logger)."""
    mod = sys.modules[base.__module__]
    logger = mod.logger
    logger.setLevel(logging.WARNING)  # its guesses are logged as warnings: they must reach _Count
    logger.propagate = False

    class Sound(base):
        def _infer_Slice(self, node):  # noqa: N802  (onnxruntime's dispatcher name)
            if self._too_large(node):
                self._forget_slice(node)
                return
            count = _Count()
            logger.addHandler(count)
            try:
                super()._infer_Slice(node)
            finally:
                logger.removeHandler(count)
            if count.n:
                self._forget_axes(node, self._slice_axes(node))

        def _too_large(self, node) -> bool:
            return _slice_too_large(self, mod, node)

        def _forget_slice(self, node) -> None:
            """The output of a Slice `_too_large` keeps its input's shape with a new symbolic
            size, related to nothing, at every sliced axis (every axis where those are unknown)."""
            vi = self.known_vi_[node.output[0]]
            shape = mod.get_shape_from_sympy_shape(self._get_sympy_shape(node, 0))
            try:
                axes = self._slice_axes(node)
            except Exception:  # noqa: BLE001 - axes or starts not constant: every axis is forgotten
                axes = []
            elem = self.known_vi_[node.input[0]].type.tensor_type.elem_type
            vi.CopyFrom(helper.make_tensor_value_info(node.output[0], elem, shape))
            self._forget_axes(node, axes or list(range(len(shape))))

        def _slice_axes(self, node) -> list[int]:
            if mod.get_opset(self.out_mp_) <= 9:
                axes, starts = mod.get_attribute(node, "axes"), mod.get_attribute(node, "starts")
            else:
                axes, starts = self._try_get_value(node, 3), self._try_get_value(node, 1)
                axes = mod.as_list(axes, keep_none=True)
                starts = mod.as_list(starts, keep_none=True)
            if not axes:
                axes = list(range(len(starts or [])))
            rank = len(self._get_shape(node, 0))
            return [int(a) + rank if int(a) < 0 else int(a) for a in axes]

        def _forget_axes(self, node, axes: list[int]) -> None:
            vi = self.known_vi_[node.output[0]]
            shape = mod.get_shape_from_value_info(vi)
            if shape is None:
                return
            for a in axes:
                if 0 <= a < len(shape):
                    shape[a] = str(self._new_symbolic_dim_from_output(node, 0, a))
            vi.CopyFrom(helper.make_tensor_value_info(node.output[0], vi.type.tensor_type.elem_type, shape))

        def _compute_conv_pool_shape(self, node, channels_last=False):
            shape = super()._compute_conv_pool_shape(node, channels_last)
            auto_pad = mod.get_attribute(node, "auto_pad", b"NOTSET")
            if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) not in ("SAME_UPPER", "SAME_LOWER"):
                return shape
            sizes = self._get_sympy_shape(node, 0)
            rank = len(sizes) - 2
            strides = mod.get_attribute(node, "strides", [1] * rank)
            first = 1 if channels_last else 2
            for ax, s in zip(range(first, first + rank), strides, strict=False):
                if not mod.is_literal(sizes[ax]):
                    shape[ax] = mod.sympy.ceiling(sizes[ax] / s)
            return shape

    return Sound


SLICE_TERMS = 200  # `Sound._too_large`: a Slice whose sizes or bounds have more terms gets new sizes


def _slice_too_large(inference, mod, node) -> bool:
    """Whether a size or bound of this Slice is a sympy expression of more than SLICE_TERMS
    terms: onnxruntime simplifies each sliced size with sympy, which on such expressions (a
    detector's image sizes through its resizing and pyramid levels) ran for over 15 minutes on
    one Slice."""
    values = [*inference._get_sympy_shape(node, 0)]
    if mod.get_opset(inference.out_mp_) > 9:
        for i in (1, 2):
            v = inference._try_get_value(node, i) if i < len(node.input) else None
            values += mod.as_list(v, keep_none=True) if v is not None else []
    return any(_terms(v) > SLICE_TERMS for v in values)


def _terms(value, limit: int | None = None) -> int:
    """The number of subexpressions of a sympy expression (0 for anything else), counted up to
    just past `limit` (SLICE_TERMS)."""
    if not hasattr(value, "args"):
        return 0
    import sympy

    limit = SLICE_TERMS if limit is None else limit
    n = 0
    for _ in sympy.preorder_traversal(value):
        n += 1
        if n > limit:
            break
    return n


def infer(base: type, model: ModelProto, auto_merge: bool) -> tuple[ModelProto, set[int | str]]:
    """`base.infer_shapes(model, auto_merge=auto_merge)` (int_max 2**31 - 1, no guessed output
    ranks) with the guesses above made sound, and the dimensions auto_merge merged others into
    where the merge may be wrong (its suggested merges' symbolic targets, unless
    `_one_together`; what `_unmerge` undoes). Raises where the inference is
    incomplete."""
    mod = sys.modules[base.__module__]
    opset = mod.get_opset(model)
    if not opset or opset < 7:
        raise ValueError("onnxruntime's symbolic shape inference needs opset 7 or above")
    inference = _sound_class(base)(2**31 - 1, auto_merge, False, 0)
    inference._preprocess(model)
    complete = False
    while inference.run_:
        complete = inference._infer_impl()
    inference._update_output_from_vi()
    if not complete:
        raise RuntimeError("incomplete symbolic shape inference")
    # a merge into a number (a size computed at run time taken for the 17 it broadcasts with)
    # stays assumed: verification's runs check it
    merged = {v for k, v in inference.suggested_merge_.items()
              if isinstance(v, str) and not _one_together(mod, inference, k, v)}
    return inference.out_mp_, merged


MERGE_PROBE = range(1, 7)  # the values `_one_together` gives each symbol
MERGE_SYMBOLS = 3  # merges of sizes of more symbols count as unsafe


def _one_together(mod, inference, a, b) -> bool:
    """Whether sizes `a` and `b` (names, sympy expressions of the inference's symbols, or
    numbers) that auto_merge took to be equal are 1 together, for every assignment of
    MERGE_PROBE to their symbols: where they broadcast, and so run, they are then equal
    (Min(128, sequence) and sequence: a position table sliced to the sequence). A merge of
    sizes that one may be 1 alone (a mask's T and a cache's P + S) is no fact."""
    try:
        ea, eb = (mod.sympy.sympify(x, locals=dict(inference.symbolic_dims_)) for x in (a, b))
        symbols = sorted(ea.free_symbols | eb.free_symbols, key=str)
        if len(symbols) > MERGE_SYMBOLS:
            return False
        fa, fb = (mod.sympy.lambdify(symbols, e, modules="sympy") for e in (ea, eb))
        for values in itertools.product(MERGE_PROBE, repeat=len(symbols)):
            if (int(fa(*values)) == 1) != (int(fb(*values)) == 1):
                return False
        return True
    except Exception:  # noqa: BLE001 - an expression it cannot evaluate: unsafe
        return False


unavailable = ""  # why load() returned None


def load():
    """onnxruntime's SymbolicShapeInference, loaded from its file alone: importing the
    package onnxruntime.tools would import torch when it is installed (seconds). None when
    it cannot load; `unavailable` then says why."""
    import importlib.util
    import sys

    global unavailable
    name = "eqsat._ort_symbolic_shape_infer"
    if name in sys.modules:
        return sys.modules[name].SymbolicShapeInference
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        unavailable = "onnxruntime is not installed"
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "tools" / "symbolic_shape_infer.py"
    if not path.is_file():
        unavailable = f"onnxruntime has no {path.name}"
        return None
    mod_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except ImportError as e:  # sympy (onnxruntime's extra "symbolic") or packaging missing
        unavailable = str(e)
        return None
    sys.modules[name] = module
    return module.SymbolicShapeInference


def _computed_split_sizes(model: ModelProto) -> bool:
    """Whether a Split (or SplitToSequence) takes its sizes from a value computed at run
    time. onnxruntime's inference then guesses an equal split, and every shape after it
    may be wrong (Split(x[..., 8], [8, 0]) would give two halves of 4)."""
    consts = set(fixed_initializers(model))
    consts.update(o for n in model.graph.node if n.op_type == "Constant" for o in n.output)
    return any(n.op_type in ("Split", "SplitToSequence") and n.domain in ("", "ai.onnx") and len(n.input) > 1
               and n.input[1] and n.input[1] not in consts for n in model.graph.node)


def infer_model(model: ModelProto, plain: GraphProto) -> ModelProto | None:
    """onnxruntime's symbolic inference of `model`, made sound: run by `Sound` (`infer`), first
    without auto_merge, then with it where it needs it; refused (None) where auto_merge unified
    two of the model's own named sizes, and its other merges that may be wrong undone from
    `plain`, onnx's own inference of the model (`_unmerge`). None where it fails or is
    unavailable (onnx's inference alone is then used)."""
    SymbolicShapeInference = load()
    if SymbolicShapeInference is None or _computed_split_sizes(model):
        return None
    import contextlib
    import io
    import tempfile

    for auto_merge in (False, True):
        try:
            # Anything it writes into the working directory (its own infer_shapes saves
            # `sym_shape_infer_temp.onnx` when incomplete) stays out of the user's folder.
            with tempfile.TemporaryDirectory(prefix="eqsat-shapes-") as scratch, contextlib.chdir(scratch), \
                    contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                out, merged = infer(SymbolicShapeInference, model, auto_merge)
        except Exception:  # noqa: BLE001 - unsupported ops, custom domains: onnx's inference still runs
            continue
        if auto_merge and _merged_named_dims(model, out):
            return None  # it assumed two of the model's own dimensions equal: not sound
        _unmerge(out.graph, plain, merged)
        return out
    return None


def _unmerge(symbolic: GraphProto, plain: GraphProto, merged: set[int | str]) -> None:
    """Undo what onnxruntime's auto_merge assumed, in `symbolic` (its inferred graph): where two
    dimensions broadcast together it takes them to be equal, though either may be 1 (a mask
    [B, 1, S, T] added to scores [B, N, S, P + S] made the cache's length T). A dimension of a
    value that is a merge target (`merged`) and that `plain` (onnx's inference, which merges
    nothing) does not give that value at that axis becomes `plain`'s dimension there, or
    unknown: a rule never takes the assumption for a fact."""
    if not merged:
        return
    known: dict[str, tuple] = {}
    for vi in [*plain.input, *plain.value_info, *plain.output]:
        t = type_of(vi.type)
        if t is not None and t.dims is not None:
            known.setdefault(vi.name, t.dims)
    for vi in [*symbolic.input, *symbolic.value_info, *symbolic.output]:
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        theirs = known.get(vi.name)
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            dim = d.dim_param if d.HasField("dim_param") else (int(d.dim_value) if d.HasField("dim_value") else None)
            if dim is None or dim not in merged:
                continue
            other = theirs[axis] if theirs is not None and axis < len(theirs) else None
            if other == dim:
                continue
            d.Clear()
            if isinstance(other, int):
                d.dim_value = other
            elif isinstance(other, str) and not other.startswith("unk__"):
                d.dim_param = other


def _merged_named_dims(before: ModelProto, after: ModelProto) -> bool:
    """Whether inference unified two differently named dimensions of the graph's inputs or
    outputs (auto_merge may unify dimensions that must broadcast together; that is only
    safe for the unknown dimensions it made up, not for the model's own)."""
    names: dict[str, str] = {}
    for old_vi, new_vi in zip([*before.graph.input, *before.graph.output], [*after.graph.input, *after.graph.output],
                              strict=False):
        old_t, new_t = type_of(old_vi.type), type_of(new_vi.type)
        if old_t is None or new_t is None or old_t.dims is None or new_t.dims is None:
            continue
        for a, b in zip(old_t.dims, new_t.dims, strict=False):
            if isinstance(a, str) and isinstance(b, str) and names.setdefault(a, b) != b:
                return True
    return len(set(names.values())) < len(names)
