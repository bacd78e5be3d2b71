"""Test models that ship with the onnx wheel, and checking eqsat against them.

Two sources, nothing downloaded:
- model directories under `onnx/backend/test/data/` (`light`, `pytorch-converted`,
  `pytorch-operator`, `simple`, `node`), with their `test_data_set_*` inputs and outputs
  where present (light models ship no inputs: random ones are used);
- the node test cases that `onnx.backend.test.case` generates in memory.

`check_case` optimizes a case's model and compares the result with the original under
onnxruntime: exactly for a round trip (no rules), within tolerance otherwise.

`check_expected` (used by `eqsat conformance`) compares the optimized model's onnxruntime
outputs with the EXPECTED outputs shipped with each case, and tells apart the cases that
onnxruntime itself cannot run or gets wrong (see `Conformance`).
"""

from __future__ import annotations

import functools
import glob
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import ModelProto, numpy_helper

from eqsat.core.randomness import random_ops
from eqsat.errors import INTERRUPTS
from eqsat.verification import compare, onnx_checker_ok, random_inputs, run

DATA_SUITES = ("light", "pytorch-converted", "pytorch-operator", "simple")


@dataclass
class Case:
    """A test model. `data_sets(model)` gives input feeds (random ones where none ship);
    `expected(model)`, where not None, gives (feeds, expected outputs in graph-output
    order) pairs as shipped with the case, and an empty list when none ship."""

    name: str
    load: Callable[[], ModelProto]
    data_sets: Callable[[ModelProto], list[dict[str, object]]] = field(repr=False)
    expected: Callable[[ModelProto], list[tuple[dict[str, object], list[object]]]] | None = field(
        default=None, repr=False)
    rtol: float = 1e-3  # onnx's backend test defaults
    atol: float = 1e-7


def data_root() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _read_pb(path: str) -> object:
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def _read_typed_pb(path: str, tp: onnx.TypeProto) -> object:
    """An expected output file, read as the output's type says (tensor, sequence, optional)."""
    with open(path, "rb") as f:
        content = f.read()
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(content)
        return numpy_helper.to_list(seq)
    if kind == "optional_type":
        opt = onnx.OptionalProto()
        opt.ParseFromString(content)
        return numpy_helper.to_optional(opt)
    t = onnx.TensorProto()
    t.ParseFromString(content)
    return numpy_helper.to_array(t)


def _numbered(folder: str, prefix: str) -> list[str]:
    return sorted(glob.glob(os.path.join(folder, f"{prefix}_*.pb")), key=lambda p: int(p.rsplit("_", 1)[1][:-3]))


def _dir_pairs(model_dir: str) -> Callable[[ModelProto], list[tuple[dict[str, object], list[object]]]]:
    """The shipped test_data_set_* folders: (feeds, expected outputs); sets whose number of
    inputs or outputs does not match the model are left out."""
    def pairs(model: ModelProto) -> list[tuple[dict[str, object], list[object]]]:
        inits = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in inits]
        outs = list(model.graph.output)
        out = []
        for ds in sorted(glob.glob(os.path.join(model_dir, "test_data_set_*"))):
            ins, exps = _numbered(ds, "input"), _numbered(ds, "output")
            if len(ins) != len(names) or len(exps) != len(outs):
                continue
            feeds = {n: _read_pb(f) for n, f in zip(names, ins, strict=True)}
            out.append((feeds, [_read_typed_pb(f, o.type) for f, o in zip(exps, outs, strict=True)]))
        return out

    return pairs


def _dir_data_sets(model_dir: str) -> Callable[[ModelProto], list[dict[str, object]]]:
    def sets(model: ModelProto) -> list[dict[str, object]]:
        inits = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in inits]
        out = []
        for ds in sorted(glob.glob(os.path.join(model_dir, "test_data_set_*"))):
            files = _numbered(ds, "input")
            if len(files) != len(names):
                continue
            out.append({n: _read_pb(f) for n, f in zip(names, files, strict=True)})
        return out or [random_inputs(model)]

    return sets


def _light_pairs(model_path: str) -> Callable[[ModelProto], list[tuple[dict[str, object], list[object]]]]:
    """onnx's `light` models ship expected outputs (`NAME_output_K.pb`) for the inputs its
    backend test runner makes up: float inputs arange(n) / n, unknown dimensions 1."""
    def pairs(model: ModelProto) -> list[tuple[dict[str, object], list[object]]]:
        prefix = model_path[: -len(".onnx")]
        files = [f"{prefix}_output_{k}.pb" for k in range(len(model.graph.output))]
        if not all(os.path.isfile(f) for f in files):
            return []
        inits = {t.name for t in model.graph.initializer}
        feeds: dict[str, object] = {}
        for vi in model.graph.input:
            if vi.name in inits:
                continue
            if vi.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
                return []
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
        exps = [_read_typed_pb(f, o.type) for f, o in zip(files, model.graph.output, strict=True)]
        return [(feeds, exps)]

    return pairs


def data_cases(suites: tuple[str, ...] = DATA_SUITES) -> Iterator[Case]:
    root = data_root()
    for suite in suites:
        sdir = os.path.join(root, suite)
        if not os.path.isdir(sdir):
            continue
        for entry in sorted(os.listdir(sdir)):
            path = os.path.join(sdir, entry)
            if os.path.isdir(path) and os.path.isfile(os.path.join(path, "model.onnx")):
                mpath = os.path.join(path, "model.onnx")
                yield Case(f"{suite}/{entry}", lambda p=mpath: onnx.load(p), _dir_data_sets(path), _dir_pairs(path))
            elif entry.endswith(".onnx"):
                yield Case(f"{suite}/{entry[:-5]}", lambda p=path: onnx.load(p), lambda m: [random_inputs(m)],
                           _light_pairs(path))


def _copy(model: ModelProto) -> ModelProto:
    """A fresh copy: what a case loads must not change when an optimizer edits it."""
    out = ModelProto()
    out.CopyFrom(model)
    return out


def collect_node_cases() -> list:
    """onnx.backend.test.case's node test cases (about 1,900 onnx TestCase tuples), generated
    afresh: onnx runs its reference implementation for each (seconds of CPU)."""
    import onnx.backend.test.case.node as node_mod

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return node_mod.collect_testcases(None)


def node_cases(collected: list | None = None) -> Iterator[Case]:
    """The node test cases generated by onnx.backend.test.case (about 1,900): those of
    `collected` (collect_node_cases's list, kept by a caller that reads them more than once),
    else generated afresh."""
    cases = collect_node_cases() if collected is None else collected
    for c in cases:
        def sets(model: ModelProto, c=c) -> list[dict[str, object]]:
            names = [i.name for i in model.graph.input]
            out = []
            for inputs, _outputs in c.data_sets or []:
                feeds = {}
                for n, v in zip(names, inputs, strict=False):
                    if isinstance(v, onnx.TensorProto):
                        v = numpy_helper.to_array(v)
                    feeds[n] = v
                out.append(feeds)
            return out

        def pairs(model: ModelProto, c=c) -> list[tuple[dict[str, object], list[object]]]:
            feeds_list = sets(model, c)
            outs = [[numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in o]
                    for _i, o in c.data_sets or []]
            return list(zip(feeds_list, outs, strict=True))

        yield Case(f"node/{c.name}", lambda c=c: _copy(c.model), sets, pairs, c.rtol, c.atol)


@dataclass
class Outcome:
    name: str
    status: str  # passed | failed | skipped
    reason: str = ""
    runner: str = "onnxruntime"  # or "reference" (onnx's ReferenceEvaluator) when ORT cannot run it


def reference_run(model: ModelProto, feeds: dict[str, object]) -> dict[str, object]:
    from onnx.reference import ReferenceEvaluator

    ev = ReferenceEvaluator(model)
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ev.run(None, feeds), strict=True))


def _staged_run(model: ModelProto, feeds: dict[str, object]) -> dict[str, object]:
    """`run` for a model with random nodes: each fed a draw keyed by its output's name."""
    from eqsat.verification.standins import StagedRunner

    return StagedRunner(model).run(feeds)


def _feeds(feeds: dict[str, object]) -> dict[str, object]:
    return {k: (np.asarray(v) if isinstance(v, np.generic) else v) for k, v in feeds.items()}


def check_case(case: Case, optimize_fn: Callable[[ModelProto], ModelProto], rtol: float = 0.0,
               atol: float = 0.0) -> Outcome:
    """Optimize the case's model and compare with the original. The original runs under
    onnxruntime, or, where onnxruntime cannot run it, under onnx's reference evaluator;
    the case is skipped (with both reasons) when neither can."""
    model = case.load()
    try:
        feeds_list = [_feeds(f) for f in case.data_sets(model)]
    except Exception as e:  # noqa: BLE001
        return Outcome(case.name, "skipped", f"no usable inputs: {_short(e)}")
    runner, execute = "onnxruntime", run
    if rnd := random_ops(model):  # each random node fed the same draw in both (eqsat.verification.standins)
        runner, execute = "onnxruntime, random nodes fed", _staged_run
    try:
        expected = [execute(model, feeds) for feeds in feeds_list]
    except Exception as e:  # noqa: BLE001 - onnxruntime cannot run the original
        if rnd:
            return Outcome(case.name, "skipped", f"random op {', '.join(sorted(rnd))}, and onnxruntime cannot run "
                                                 f"the rest: {_short(e)}", "none")
        why = "onnxruntime cannot run the original: " + _short(e)
        runner, execute = "reference", reference_run
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected = [reference_run(model, feeds) for feeds in feeds_list]
        except Exception as e2:  # noqa: BLE001
            return Outcome(case.name, "skipped", f"{why}; reference evaluator: {_short(e2)}", "none")
    try:
        opt = optimize_fn(model)
    except Exception as e:  # noqa: BLE001
        return Outcome(case.name, "failed", f"optimize raised {type(e).__name__}: {_short(e)}", runner)
    why = onnx_checker_ok(opt)
    if why:
        return Outcome(case.name, "failed", f"onnx checker rejects the result: {why}", runner)
    try:
        for feeds, exp in zip(feeds_list, expected, strict=True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = execute(opt, feeds)
            bad = compare(exp, got, rtol, atol)
            if bad:
                return Outcome(case.name, "failed", "; ".join(map(str, bad[:3])), runner)
    except Exception as e:  # noqa: BLE001
        return Outcome(case.name, "failed", f"{runner} cannot run the result: " + _short(e), runner)
    return Outcome(case.name, "passed", "", runner)


def _short(e: Exception) -> str:
    s = " ".join(str(e).split())
    return s[:300]


def summarize(outcomes: list[Outcome]) -> dict[str, int]:
    out = {"passed": 0, "failed": 0, "skipped": 0}
    for o in outcomes:
        out[o.status] += 1
    return out


# Statuses of `check_expected`, in the order reports list them.
PASSED, FAILED = "passed", "failed"
ORT_CANNOT_RUN, ORT_DIFFERS, SKIPPED = "not runnable by onnxruntime", "onnxruntime itself differs", "skipped"
STATUSES = (PASSED, FAILED, ORT_DIFFERS, ORT_CANNOT_RUN, SKIPPED)


@dataclass
class Verdict:
    """One case of `eqsat conformance`. `basis` is what the optimized model was compared
    with: "expected" (the outputs shipped with the case) or "original" (the original model
    under onnxruntime, for the cases that ship no expected outputs)."""

    name: str
    status: str
    reason: str = ""
    basis: str = "expected"
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "reason": self.reason, "basis": self.basis,
                "seconds": round(self.seconds, 3)}


def _named(model: ModelProto, values: list[object]) -> dict[str, object]:
    return dict(zip([o.name for o in model.graph.output], values, strict=True))


def check_expected(case: Case, optimize_fn: Callable[[ModelProto], ModelProto], rtol: float | None = None,
                   atol: float | None = None) -> Verdict:
    """Optimize the case's model with `optimize_fn` and compare the optimized model's
    onnxruntime outputs with the case's expected outputs (tolerances: the case's own,
    onnx's backend defaults, unless given).

    The verdict is `passed` or `failed` for the cases onnxruntime runs correctly; a case
    whose original onnxruntime cannot run is `not runnable by onnxruntime`, one whose
    original already differs from the expected outputs under onnxruntime is `onnxruntime
    itself differs`, one with random outputs is `skipped`; none of those count for or
    against eqsat. Never raises (but KeyboardInterrupt)."""
    import time

    t0 = time.perf_counter()
    rtol = case.rtol if rtol is None else rtol
    atol = case.atol if atol is None else atol

    def verdict(status: str, reason: str = "", basis: str = "expected") -> Verdict:
        return Verdict(case.name, status, reason, basis, time.perf_counter() - t0)

    try:
        model = case.load()
        rnd = random_ops(model)
        if rnd:
            return verdict(SKIPPED, f"random op {', '.join(sorted(rnd))}: outputs differ run to run")
        pairs = case.expected(model) if case.expected else []
        basis = "expected"
        if not pairs:  # nothing shipped: compare with the original under onnxruntime
            basis = "original"
            pairs = [(f, None) for f in case.data_sets(model)]
        pairs = [(_feeds(f), None if e is None else _named(model, e)) for f, e in pairs]
    except Exception as e:  # noqa: BLE001
        return verdict(SKIPPED, f"no usable inputs: {_short(e)}")
    if not pairs:
        return verdict(SKIPPED, "no inputs")

    references = []
    for feeds, exp in pairs:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = run(model, feeds)
        except Exception as e:  # noqa: BLE001 - an op or type onnxruntime lacks, ...
            return verdict(ORT_CANNOT_RUN, _short(e), basis)
        if exp is None:
            exp = ref
        else:
            bad = compare(exp, ref, rtol, atol)
            if bad:
                return verdict(ORT_DIFFERS, "original under onnxruntime: " + "; ".join(map(str, bad[:3])), basis)
        references.append((feeds, exp, ref))

    try:
        opt = optimize_fn(model)
    except Exception as e:  # noqa: BLE001
        return verdict(FAILED, f"optimize raised {type(e).__name__}: {_short(e)}", basis)
    except BaseException as e:  # egglog panics (pyo3 PanicException) are BaseException
        if isinstance(e, INTERRUPTS):
            raise
        return verdict(FAILED, f"optimize panicked ({type(e).__name__}): {_short(e)}", basis)
    why = onnx_checker_ok(opt)
    if why:
        return verdict(FAILED, f"onnx checker rejects the optimized model: {why}", basis)
    for feeds, exp, ref in references:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = run(opt, feeds)
        except Exception as e:  # noqa: BLE001
            return verdict(FAILED, "onnxruntime cannot run the optimized model: " + _short(e), basis)
        bad = compare(exp, got, rtol, atol)
        if bad:
            vs_orig = compare(ref, got, rtol, atol)
            tail = "" if basis == "original" else (
                " (the original under onnxruntime is within tolerance; optimized vs original: "
                + ("; ".join(map(str, vs_orig[:1])) if vs_orig else "within tolerance") + ")")
            return verdict(FAILED, "; ".join(map(str, bad[:3])) + tail, basis)
    return verdict(PASSED, "", basis)


@functools.cache
def _all_cases() -> tuple[Case, ...]:
    return (*data_cases(), *node_cases())


def all_cases() -> list[Case]:
    """The model test data directories, then the generated node test cases (generated once
    per process: about 10 s)."""
    return list(_all_cases())


def pass_rate(verdicts: list[Verdict]) -> float | None:
    """Passed / (passed + failed): the share of the cases onnxruntime itself runs correctly
    that still pass after optimization; None when there are none."""
    p = sum(v.status == PASSED for v in verdicts)
    f = sum(v.status == FAILED for v in verdicts)
    return p / (p + f) if p + f else None
