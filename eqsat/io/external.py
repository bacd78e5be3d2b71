"""Weights in external data files, kept out of memory.

A model read by `modelio.load_model` keeps each large external tensor as a reference: its
`location` is rewritten to the data file's absolute path, and its bytes stay on disk until
something needs them (`read`) or the model is saved (`write_model`, which streams them
into the output's own data file). Copying such a model is cheap, and nothing ever has to
hold more than 2 GiB in one protobuf. onnxruntime and the onnx checker only accept relative
locations, so a model with references must go through `write_model` before either sees it.

A model reads data only from regular files inside its own folder (`bind`), as onnxruntime
does; what eqsat writes keeps its weights in the output's own data file, whose name comes
from the output's, never from the model.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto

from eqsat.errors import InputError, OptimizeError

INLINE_MAX = 64 * 1024  # external tensors smaller than this are read into memory at load
EXTERNAL_KEYS = ("location", "offset", "length", "checksum")  # what onnxruntime reads
ALIGN = 4096  # offsets of large tensors in written data files (lets runtimes mmap them)


def external_info(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def tensors(model: ModelProto) -> Iterator[tuple[TensorProto, str, bool]]:
    """Every tensor the model holds, as (tensor, label, initializer): the main graph's
    initializers (`initializer` True: those may stay on disk), then sparse initializers,
    node attributes (dense and sparse), subgraphs, model-local functions' nodes and training
    graphs. `label` names it for an error: `tensor 'w'`, or `node 'n'` for a nameless one."""
    yield from ((t, _label(t, None), True) for t in model.graph.initializer)
    yield from _graph_tensors(model.graph, skip_initializers=True)
    for f in model.functions:
        yield from _node_tensors(f.node)
    for ti in model.training_info:
        yield from _graph_tensors(ti.initialization)
        yield from _graph_tensors(ti.algorithm)


def _label(t: TensorProto, node: NodeProto | None) -> str:
    if t.name or node is None:
        return f"tensor '{t.name}'"
    return f"node '{node.name or (node.output[0] if node.output else node.op_type)}'"


def _graph_tensors(g: GraphProto, skip_initializers: bool = False) -> Iterator[tuple[TensorProto, str, bool]]:
    if not skip_initializers:
        yield from ((t, _label(t, None), False) for t in g.initializer)
    for s in g.sparse_initializer:
        yield from ((t, _label(t, None), False) for t in (s.values, s.indices))
    yield from _node_tensors(g.node)


def _node_tensors(nodes) -> Iterator[tuple[TensorProto, str, bool]]:
    for n in nodes:
        for a in n.attribute:
            if a.type == AttributeProto.TENSOR:
                yield a.t, _label(a.t, n), False
            elif a.type == AttributeProto.TENSORS:
                yield from ((t, _label(t, n), False) for t in a.tensors)
            elif a.type in (AttributeProto.SPARSE_TENSOR, AttributeProto.SPARSE_TENSORS):
                for s in [a.sparse_tensor] if a.type == AttributeProto.SPARSE_TENSOR else a.sparse_tensors:
                    yield from ((t, _label(s.values, n), False) for t in (s.values, s.indices))
            elif a.type == AttributeProto.GRAPH:
                yield from _graph_tensors(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _graph_tensors(sub)


def data_files(model: ModelProto, base_dir: Path) -> set[Path]:
    """The files (resolved) that the model's external tensors name, before `bind`, wherever
    they are; a location that names no file (empty, with a NUL byte) names none."""
    found = set()
    for t, _, _ in tensors(model):
        loc = external_info(t).get("location") if is_external(t) else None
        if loc:
            try:
                found.add((base_dir / loc).resolve())
            except (OSError, RuntimeError, ValueError):  # a NUL byte, a symbolic link loop
                continue
    return found


@functools.cache
def data_files_of(path: Path) -> tuple[Path, ...]:
    """The external data files an ONNX model file names, without reading the model unless
    it may have some: only a file that holds the key `location` is parsed (a model whose
    weights live in data files is a small file). Any other file names none."""
    import mmap

    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m.find(b"location") < 0:
                return ()
            data = m[:]
    except (OSError, ValueError):  # empty, unreadable
        return ()
    try:
        model = ModelProto.FromString(data)
    except Exception:  # noqa: BLE001 - not a model (a rule file, a JSON e-graph)
        return ()
    return tuple(sorted(data_files(model, path.parent.resolve())))


def bind(model: ModelProto, base_dir: Path, what: str | os.PathLike = "the model") -> None:
    """Make the model's external tensors self-contained: large initializers of the main graph
    become absolute references; small ones, and every other tensor (`tensors`), are read
    into memory. Every location is checked before any byte is read: it must name a regular
    file inside `base_dir` (relative, not leaving it by `..` or a symbolic link: what
    onnxruntime accepts), with an offset and length inside the file, and no key onnxruntime
    refuses (`EXTERNAL_KEYS`, each once). Raises InputError
    "`what`: tensor 'w': why" otherwise."""
    base = Path(os.path.realpath(base_dir))
    found = [(t, initializer, *_checked(t, label, base, what))
             for t, label, initializer in tensors(model) if is_external(t)]
    for t, initializer, path, offset, length in found:
        del t.external_data[:]
        if initializer and length >= INLINE_MAX:
            for k, v in (("location", str(path)), ("offset", str(offset)), ("length", str(length))):
                e = t.external_data.add()
                e.key, e.value = k, v
        else:
            with open(path, "rb") as f:
                f.seek(offset)
                t.raw_data = f.read(length)
            t.data_location = TensorProto.DEFAULT


def _checked(t: TensorProto, label: str, base: Path, what) -> tuple[Path, int, int]:
    """(resolved file, offset, length) of an external tensor whose location `bind` accepts."""
    info = external_info(t)
    loc = info.get("location", "")

    def refuse(why: str):
        raise InputError(f"{what}: {label}: {why}")

    seen: set[str] = set()
    for e in t.external_data:  # onnxruntime refuses any other key, and a key given twice
        key = e.key if e.key.isprintable() else repr(e.key)
        if e.key not in EXTERNAL_KEYS:
            refuse(f"external data key '{key}' is not one of {', '.join(EXTERNAL_KEYS)} "
                   "(onnxruntime refuses the model)")
        if e.key in seen:
            refuse(f"external data key '{key}' is given twice (onnxruntime refuses the model)")
        seen.add(e.key)

    shown = f"'{loc}'" if loc.isprintable() else repr(loc)
    if not loc:
        refuse("external data has no location")
    if "\0" in loc:
        refuse(f"external data location {shown} is not a file name")
    if os.path.isabs(loc):
        refuse(f"external data location {shown} is absolute; it must name a file inside the model's "
               "folder, relative to it (onnxruntime refuses it too)")
    norm = os.path.normpath(loc)
    try:
        path = Path(os.path.realpath(base / loc))
    except (OSError, ValueError):
        path = None
    if norm == os.pardir or norm.startswith(os.pardir + os.sep) or path is None or not path.is_relative_to(base):
        refuse(f"external data location {shown} leads outside the model's folder {base}; move the file "
               "into that folder (onnxruntime refuses it too)")
    try:
        size = path.stat().st_size if path.is_file() else None
    except OSError:  # a name too long
        size = None
    if size is None:
        refuse(f"external data file {shown} not found in the model's folder {base}" if not os.path.lexists(path)
               else f"external data location {shown} is not a regular file")
    offset, length = (_count(info, key, refuse) for key in ("offset", "length"))
    offset = offset or 0
    length = max(size - offset, 0) if length is None else length
    if offset + length > size:
        refuse(f"external data runs past the end of {shown} (truncated file?)")
    return path, offset, length


def _count(info: dict[str, str], key: str, refuse) -> int | None:
    """The integer >= 0 at `key` of external data info, None where absent: decimal digits
    only, as onnxruntime reads it (it refuses an empty value, and " 4", "+4" or "4_0",
    which Python's int() takes)."""
    text = info.get(key)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()):  # "" too: onnxruntime refuses an empty number
        refuse(f"external data {key} '{text}' is not an integer >= 0")
    return int(text)


def _where(t: TensorProto) -> tuple[str, int, int]:
    info = external_info(t)
    return info["location"], int(info.get("offset", 0) or 0), int(info["length"])


def read(t: TensorProto) -> np.ndarray:
    """The array of an external reference, read from its file."""
    path, offset, length = _where(t)
    dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
    arr = np.fromfile(path, dtype=dtype, count=length // dtype.itemsize, offset=offset)
    return arr.reshape(tuple(t.dims))


def content_bytes(t: TensorProto) -> int:
    """The size of a tensor's data, without serializing or copying it: the element count
    times the element's width, packed for the types narrower than a byte (int4, float4,
    float6, int2: raw_data packs them), as raw_data holds it. Reading `raw_data` would copy
    the bytes (1 s for a 500 MB model), and ByteSize fails over 2 GiB. Strings: the proto's
    own size."""
    if is_external(t):
        return _where(t)[2]
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type))
    except (KeyError, TypeError, ValueError):  # undefined
        dtype = None
    if dtype is None or dtype.kind == "O":
        return len(t.raw_data) if t.HasField("raw_data") else t.ByteSize()
    n = 1
    for d in t.dims:
        n *= int(d)
    return (n * _bits(dtype) + 7) // 8


def _bits(dtype: np.dtype) -> int:
    """Bits per element: ml_dtypes' own count for its one-byte types (int4 is 4, float6 6)."""
    if dtype.itemsize == 1 and dtype.kind not in "b":
        import ml_dtypes

        for info in (ml_dtypes.finfo, ml_dtypes.iinfo):
            try:
                return int(info(dtype).bits)
            except (TypeError, ValueError):
                continue
    return dtype.itemsize * 8


def has_references(model: ModelProto) -> bool:
    return any(is_external(t) for t in model.graph.initializer)


def any_external(model: ModelProto) -> bool:
    """Whether any tensor (`tensors`) keeps its data in a file: the tensors `bind` rewrites."""
    return any(is_external(t) for t, _, _ in tensors(model))


def check_bound(model: ModelProto) -> None:
    """Raise OptimizeError unless every external tensor of `model` is a reference `bind`
    made (a main graph initializer at an absolute path): another location would be read
    relative to the output's folder, or the working folder, when the model is written."""
    for t, label, initializer in tensors(model):
        if is_external(t) and not (initializer and os.path.isabs(external_info(t).get("location", ""))):
            raise OptimizeError(f"{label} keeps its data at '{external_info(t).get('location', '')}', relative to "
                                "no folder: read the model with eqsat.io.modelio.load_model before writing it")


def write_model(model: ModelProto, path: Path, data_name: str | None = None, threshold: int = 1024) -> None:
    """Save `model` to `path` with its initializers over `threshold` bytes in one data file
    (`data_name`, default `<name>.data`, beside it): references are streamed from their
    files, in-memory tensors written from memory. `model` itself is not changed."""
    path = Path(path)
    data_name = data_name or path.name + ".data"
    out = ModelProto()
    _copy_fields(model, out, skip="graph")
    _copy_fields(model.graph, out.graph, skip="initializer")
    g, og = model.graph, out.graph
    offset = 0
    with open(path.parent / data_name, "wb") as data:
        for t in g.initializer:
            o = og.initializer.add()
            size = content_bytes(t)
            if size <= threshold and not is_external(t):
                o.CopyFrom(t)
                continue
            for fname in ("name", "data_type", "doc_string"):
                setattr(o, fname, getattr(t, fname))
            o.dims.extend(t.dims)
            if size >= ALIGN and offset % ALIGN:
                pad = ALIGN - offset % ALIGN
                data.write(b"\0" * pad)
                offset += pad
            if is_external(t):
                src, src_off, length = _where(t)
                with open(src, "rb") as fsrc:
                    fsrc.seek(src_off)
                    _copy(fsrc, data, length)
            else:
                raw = t.raw_data if t.raw_data else onnx.numpy_helper.to_array(t).tobytes()
                data.write(raw)
                length = len(raw)
            o.data_location = TensorProto.EXTERNAL
            for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(length))):
                e = o.external_data.add()
                e.key, e.value = k, v
            offset += length
    with open(path, "wb") as f:
        f.write(out.SerializeToString())
    if offset == 0:
        os.remove(path.parent / data_name)


def _copy(src, dst, length: int, chunk: int = 64 << 20) -> None:
    left = length
    while left > 0:
        buf = src.read(min(chunk, left))
        if not buf:
            raise OSError("external data file ended early")
        dst.write(buf)
        left -= len(buf)


def _copy_fields(src, dst, skip: str) -> None:
    """Copy every set field of a message except `skip` (the big one) without copying it."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)
