"""Weights in external data files, kept out of memory.

A model read by `modelio.load_model` keeps each large external tensor as a reference: its
`location` is rewritten to the data file's absolute path, and its bytes stay on disk until
something needs them (`read`) or the model is saved (`write_model`, which streams them
into the output's own data file). Copying such a model is cheap, and nothing ever has to
hold more than 2 GiB in one protobuf. onnxruntime and the onnx checker only accept relative
locations, so a model with references must go through `write_model` before either sees it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto

from .errors import InputError

INLINE_MAX = 64 * 1024  # external tensors smaller than this are read into memory at load
ALIGN = 4096  # offsets of large tensors in written data files (lets runtimes mmap them)


def external_info(t: TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def _node_tensors(g: GraphProto) -> Iterator[TensorProto]:
    """Tensors held by the graph's nodes: attributes, and subgraphs' initializers and nodes."""
    for n in g.node:
        for a in n.attribute:
            if a.type == AttributeProto.TENSOR:
                yield a.t
            elif a.type == AttributeProto.TENSORS:
                yield from a.tensors
            elif a.type == AttributeProto.GRAPH:
                yield from a.g.initializer
                yield from _node_tensors(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from sub.initializer
                    yield from _node_tensors(sub)


def data_files(model: ModelProto, base_dir: Path) -> set[Path]:
    """The files (resolved) that the model's external tensors name, before `bind`."""
    return {(base_dir / external_info(t)["location"]).resolve()
            for t in [*model.graph.initializer, *_node_tensors(model.graph)]
            if is_external(t) and external_info(t).get("location")}


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


def bind(model: ModelProto, base_dir: Path) -> bool:
    """Make the model's external tensors self-contained: large initializers of the main graph
    become absolute references; small ones, and every tensor outside the main graph's
    initializers, are read into memory. Raises InputError for a missing or short data file.
    Returns whether every data file lies inside `base_dir` once links are resolved:
    onnxruntime refuses to run a model's file otherwise (eqsat reads it, and writes its own
    data file)."""
    inside = [_bind(t, base_dir, keep_reference=True) for t in model.graph.initializer]
    inside += [_bind(t, base_dir, keep_reference=False) for t in _node_tensors(model.graph)]
    return all(inside)


def _bind(t: TensorProto, base_dir: Path, keep_reference: bool) -> bool:
    if not is_external(t):
        return True
    info = external_info(t)
    loc = info.get("location", "")
    path = (base_dir / loc).resolve()
    inside = path.is_relative_to(base_dir.resolve())
    if not loc or not path.is_file():
        raise InputError(f"external data file '{loc}' of tensor '{t.name}' not found next to the model")
    offset = int(info.get("offset", 0) or 0)
    length = int(info["length"]) if info.get("length") else path.stat().st_size - offset
    if offset + length > path.stat().st_size:
        raise InputError(f"external data of tensor '{t.name}' runs past the end of '{loc}' (truncated file?)")
    del t.external_data[:]
    if keep_reference and length >= INLINE_MAX:
        for k, v in (("location", str(path)), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
    else:
        with open(path, "rb") as f:
            f.seek(offset)
            t.raw_data = f.read(length)
        t.data_location = TensorProto.DEFAULT
    return inside


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
    """Whether any tensor, in the main graph's initializers, node attributes or subgraphs,
    keeps its data in a file: the tensors `bind` rewrites."""
    return has_references(model) or any(is_external(t) for t in _node_tensors(model.graph))


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
