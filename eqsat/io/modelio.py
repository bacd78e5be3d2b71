"""Reading and writing ONNX files: clear errors for bad input, external data for large
models, and atomic writes (a temporary file in the target folder, then a rename)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import ModelProto

from eqsat.core.wellformed import check_data, check_text
from eqsat.errors import EqsatError, InputError, InvalidModelError, OptimizeError
from eqsat.io import allocator, external
from eqsat.io.atomic import Commit, destination

# Protobuf cannot serialize a message over 2 GiB; above this much tensor data, weights go
# to an external data file next to the model.
EXTERNAL_DATA_THRESHOLD = 1_800_000_000


def load_model(path: str | os.PathLike) -> ModelProto:
    return read_model(path)[0]


def read_model(path: str | os.PathLike, check: bool = False) -> tuple[ModelProto, bool]:
    """`load_model`, and True: onnxruntime can run the file itself, for every external data
    location eqsat reads it reads too (a regular file inside the model's folder: eqsat.io.external
    .bind refuses any other with InputError before any byte is read; the onnx checker is
    stricter, refusing a symbolic link in a location, and reads the file only for weights kept
    on disk). `check` runs `check_model`: on the bytes just read where the model has no
    external data and is checked in memory, instead of serializing it again (about 1.3 s and
    500 MB of fresh memory for GPT-2); otherwise as check_model does."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file")
    if p.is_dir():
        raise InputError(f"{p}: is a directory, not an ONNX file")
    if p.stat().st_size == 0:
        raise InputError(f"{p}: the file is empty")
    try:  # binary protobuf whatever the extension (onnx would read a .json path as JSON)
        data = p.read_bytes()
        model = ModelProto.FromString(data)
    except DecodeError as e:
        with open(p, "rb") as f:
            head = f.read(64).lstrip()
        if head.startswith((b"{", b"[")):
            raise InputError(f"{p}: not an ONNX model: it is JSON, and eqsat reads binary .onnx files "
                             "(an e-graph or a choice file goes to `eqsat extract`)") from None
        raise InputError(f"{p}: not an ONNX model (protobuf parse failed: {e}); is the file truncated?") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{p}: cannot read the model: {e}") from None
    if not model.HasField("graph") or not model.opset_import:
        raise InputError(f"{p}: not an ONNX model (no graph or no opset import)")
    # The bytes serve the checker only for a model checked in memory as it was read: bind
    # rewrites external tensors, and a model over the threshold is checked from its file.
    if not check or external.any_external(model) or on_disk(model):
        del data
        data = None
    check_text(model, str(p))
    external.bind(model, p.parent, p)
    check_data(model, str(p))
    if check:
        check_model(model, str(p), p, serialized=data)
    del data
    return model, True


def supported_opsets() -> dict[str, tuple[int, int]]:
    """{domain: (oldest, newest)} opset versions of the ONNX domains the installed onnx
    defines ("" is the default domain, ai.onnx). Ops of a newer opset have semantics eqsat
    cannot know, and there is no opset before 1; other domains (custom ops) are free."""
    return {d: (int(lo), int(hi)) for d, (lo, hi) in onnx.defs.C.schema_version_map().items()}


def check_opsets(model: ModelProto, what: str) -> None:
    """Raise InvalidModelError when the model imports an ONNX domain at an opset outside
    `supported_opsets()`."""
    ranges = supported_opsets()
    for o in model.opset_import:
        domain = "" if o.domain == "ai.onnx" else o.domain
        if domain not in ranges:
            continue
        lo, hi = ranges[domain]
        label = "the default ONNX domain (ai.onnx)" if domain == "" else f"domain {domain}"
        if o.version < lo:
            raise InvalidModelError(
                f"{what}: opset {o.version} of {label} is older than supported ({lo} to {hi}); "
                f"re-export the model with an opset from {lo} to {hi}")
        if o.version > hi:
            raise InvalidModelError(
                f"{what}: opset {o.version} of {label} is newer than supported ({lo} to {hi}, the newest that "
                f"onnx {onnx.__version__} knows); upgrade onnx or re-export the model at opset {hi} or older")


def check_model(model: ModelProto, what: str, path: str | os.PathLike | None = None,
                serialized: bytes | None = None) -> None:
    """Check the opsets (`check_opsets`), then run the onnx checker; raises
    InvalidModelError naming `what` with the reason. A model whose weights stay on disk is
    checked from its file `path`; `serialized`, the model's own bytes when the caller holds
    them, spares the checker a serialization."""
    check_opsets(model, what)
    try:
        if on_disk(model):
            if path is not None:
                onnx.checker.check_model(str(path))
            return
        onnx.checker.check_model(model if serialized is None else serialized)
    except onnx.checker.ValidationError as e:
        raise InvalidModelError(f"{what}: the onnx checker rejects the model: {_first_line(e)}") from None


def model_shell(model: ModelProto, opsets: dict[str, int] | None = None, full: bool = False) -> ModelProto:
    """A new model with `model`'s header and no graph: IR version, producer, domain, model
    version, opset imports (plus `opsets`, domain -> version) and local functions; `full`
    also copies the doc string, metadata and training info (a copy of the whole model, where
    the others are working copies for a checker or inference). The caller fills the graph
    field by field: protobuf cannot copy more than 2 GiB at once."""
    from onnx import helper

    m = ModelProto()
    for f in ("ir_version", "producer_name", "producer_version", "domain", "model_version"):
        setattr(m, f, getattr(model, f))
    m.opset_import.extend(model.opset_import)
    for d, v in sorted((opsets or {}).items()):
        m.opset_import.append(helper.make_opsetid(d, v))
    m.functions.extend(model.functions)
    if full:
        m.doc_string = model.doc_string
        m.metadata_props.extend(model.metadata_props)
        m.training_info.extend(model.training_info)
    return m


def model_bytes(model: ModelProto) -> int:
    """Bytes of initializer data, in memory or in external files."""
    return sum(external.content_bytes(t) for t in model.graph.initializer)


def on_disk(model: ModelProto) -> bool:
    """Whether the model's weights stay in files: its initializers refer to data files, or
    hold more than one protobuf can (EXTERNAL_DATA_THRESHOLD). Such a model is written with
    a data file, checked and run from its file, never serialized whole."""
    return external.has_references(model) or model_bytes(model) > EXTERNAL_DATA_THRESHOLD


def save_model(model: ModelProto, path: str | os.PathLike, external_data: bool | None = None,
               check: bool = True) -> Path:
    """Write atomically (`stage_model`, then a commit of the model and its data file as a
    unit). `external_data=None` stores weights in `OUT.data` when they are already on disk
    (see eqsat.io.external) or exceed what one protobuf can hold. The written file is checked
    with the onnx checker before it replaces the target; on any failure nothing is left
    behind and no file replaced."""
    with staged(model, path, external_data, check):
        pass
    return Path(path)


@contextmanager
def staged(model: ModelProto, path: str | os.PathLike, external_data: bool | None = None,
           check: bool = True) -> Iterator[Path]:
    """`save_model` in two steps: write `model` (and its data file) under a temporary folder
    beside `path`, check it, and yield the written file, so that the caller can run it
    (onnxruntime reads a file faster than it takes a model serialized again) before it
    counts as saved. Leaving the block normally moves it to `path` (`stage_model`); an
    exception leaves nothing behind and `path` as it was."""
    with Commit() as c:
        written = stage_model(model, path, c, external_data, check)
        yield written
        c.commit()


def stage_model(model: ModelProto, path: str | os.PathLike, commit: Commit, external_data: bool | None = None,
                check: bool = True) -> Path:
    """Write `model` into a temporary folder beside `path` and check it; returns the written
    file, which `commit` renames to `path` (a symbolic link's target) with its data file,
    OUT.data beside it (a name never taken from the model; a link there is replaced, not
    written through: the model reads it from its own folder), when it commits, together
    with whatever else it holds; a model staged for `path` before is withdrawn.
    `external_data=None` stores weights in the data file when they are already on disk (see
    eqsat.io.external) or exceed what one protobuf can hold. Raises OptimizeError for a model
    that fails the onnx checker, EqsatError when a file cannot be written (a full disk),
    before anything is renamed."""
    out = destination(path)
    commit.withdraw(out, out.with_name(out.name + ".data"))  # staged again: this one replaces the last
    external.check_bound(model)
    if external_data is None:
        external_data = on_disk(model)
    tmpdir = commit.folder(out)
    tmp = tmpdir / out.name
    data_name = out.name + ".data"
    try:
        if external_data:
            external.write_model(model, tmp, data_name)
            serialized = None
        else:  # binary, whatever the extension
            serialized = _serialize(model)
            tmp.write_bytes(serialized)
    except OSError as e:  # a full disk
        raise EqsatError(f"{out}: cannot write it: {e.strerror or e}") from None
    if check:
        try:  # the bytes in hand: reading the file back costs the checker seven times as much
            onnx.checker.check_model(str(tmp) if serialized is None else serialized)
        except onnx.checker.ValidationError as e:
            raise OptimizeError(f"the optimized model fails the onnx checker: {_first_line(e)}") from None
    del serialized
    if (tmpdir / data_name).exists():
        commit.add(tmpdir / data_name, out.with_name(data_name), through_links=False)  # read from beside it
    commit.add(tmp, out)
    return tmp


def _serialize(model: ModelProto) -> bytes:
    """The model's bytes, in buffers the system takes back (eqsat.io.allocator.mapped). Over
    protobuf's 2 GiB, which tensors held in nodes rather than initializers can reach (only
    initializers go to an external data file), an OptimizeError says so."""
    try:
        with allocator.mapped():
            return model.SerializeToString()
    except ValueError as e:
        raise OptimizeError(f"the optimized model cannot be written as one protobuf ({_first_line(e)}): "
                            "its tensors outside the initializers (Constant nodes, attributes) exceed 2 GiB; "
                            "move large constants to initializers") from None


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__
