"""Draws that set the conditions of a model's Ifs and Wheres every way three at a time.

Verification's runs reach a combination of If conditions only where the inputs drawn lead
there, and its forced runs set every If of one nesting depth alike (all true, all false): the
optimized model need not have as many Ifs, so no If of one model is matched to one of the other.
Two Ifs on sum(x) > sum(u) and sum(u) > mean(x) were never one false and the other true, and a
main-graph Relu that mattered only there was dropped by a rule file's Relu(y) -> y and written
with exit 0; so too with two Wheres on such scalar conditions, which nothing forces.
`covering_draws` picks inputs by what the original alone computes: it runs a copy of the
original whose outputs are its main-graph conditions on many draws (and those draws scaled,
as the edge runs scale them), and keeps draws until every three conditions have been true
and false in each of their eight ways (where some draw gives that way: three Ifs on
sum(x) > 0, sum(u) > 0 and sum(v) > 0 went every way but false, true, false). The caller runs both models
on those inputs, which no right program can tell apart from others.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import onnx
from onnx import ModelProto

from eqsat.core.scopes import subgraphs
from eqsat.verification.feeds import Feeds

COVERING_SEEDS = 32  # draws `covering_draws` tries (each also scaled as the edge runs scale floats)
COVERING_IFS = 6  # main-graph conditions it covers, at most
COVERING_WAYS = 3  # every this many of them take each of their 2 ** 3 ways (where some draw gives it)
COVERING_FROM = 1000  # its first seed: other draws than the random runs' and the edge runs'
COVERING_KINDS = ("random", "scaled", "far")  # each draw as drawn, times 100, times 10000
# candidates in a row that give no condition a new way before the search stops: conditions that
# no draw moves (a shape's) would have it run every candidate, and a large model's runs take
# seconds each (a count, not a time, so that every machine picks the same draws)
COVERING_STALL = 12


def covering_draws(original: ModelProto, conditions: list[str], feeds: Feeds, sizes: dict[str, int],
                   wide: bool) -> list[tuple[str, int, dict[str, np.ndarray]]]:
    """(kind, seed, inputs) of draws at seeds from COVERING_FROM on (kind "random": as drawn;
    "scaled", "far": Feeds.with_special_values of it) on which the original's main-graph values
    `conditions` (If and Where conditions; those of one element on the first draw the original
    runs, the first COVERING_IFS of them) take, for every COVERING_WAYS of them (or all, where
    fewer), each of their ways that COVERING_SEEDS such draws reach (until COVERING_STALL
    candidates in a row add none), greedily: a draw is kept where it gives some of them a way no kept draw gave them. []
    where fewer than two conditions, or where onnxruntime cannot run the copy of the original
    that outputs them."""
    conditions = list(dict.fromkeys(conditions))
    if len(conditions) < 2:
        return []
    inputs = {i.name for i in original.graph.input}
    probe = _probe(original, [c for c in conditions if c not in inputs])
    if probe is None:
        return []
    wanted: set[tuple[tuple[int, ...], tuple[bool, ...]]] | None = None
    ways_of = COVERING_WAYS
    picked: list[tuple[str, int, dict[str, np.ndarray]]] = []
    stall = 0
    for seed, kind, f in _draws(feeds, sizes, wide):
        if stall >= COVERING_STALL:
            break
        values = _values(probe, conditions, inputs, f)
        if values is None:
            continue
        if wanted is None:  # the conditions of one element (a Where's may be a mask's), as many as are paired
            conditions = [c for c, v in zip(conditions, values, strict=True) if v is not None][:COVERING_IFS]
            if len(conditions) < 2:
                return []
            ways_of = min(COVERING_WAYS, len(conditions))
            wanted = {(held, bits) for held in itertools.combinations(range(len(conditions)), ways_of)
                      for bits in itertools.product((True, False), repeat=ways_of)}
            values = _values(probe, conditions, inputs, f) or []
        ways = {(held, tuple(values[i] for i in held))
                for held in itertools.combinations(range(len(values)), ways_of)}
        stall += 1
        if ways & wanted:
            picked.append((kind, seed, f))
            wanted -= ways
            stall = 0
        if not wanted:
            break
    return picked


def _draws(feeds: Feeds, sizes: dict[str, int], wide: bool) -> Iterator[tuple[int, str, dict[str, np.ndarray]]]:
    """(seed, kind, inputs) of `covering_draws`' candidates, drawn as they are needed."""
    for seed in range(COVERING_FROM, COVERING_FROM + COVERING_SEEDS):
        try:
            drawn = feeds.draw(sizes, seed, wide)
        except Exception:  # noqa: BLE001, S112 - inputs that cannot be made at this seed
            continue
        for kind in COVERING_KINDS:
            yield seed, kind, drawn if kind == "random" else feeds.with_special_values(drawn, seed, kind)


def _values(probe: object, conditions: list[str], inputs: set[str], f: dict[str, np.ndarray]) -> list | None:
    """Each condition's value on inputs `f` (a graph input's as drawn, a computed one's as the
    probe computes it), None for one not of one element; None where the probe does not run."""
    got: dict[str, object] = dict(f)
    if any(c not in inputs for c in conditions):
        declared = {i.name for i in probe.get_inputs()}
        names = [o.name for o in probe.get_outputs()]
        try:
            got |= dict(zip(names, probe.run(names, {k: v for k, v in f.items() if k in declared}), strict=True))
        except Exception:  # noqa: BLE001 - the original does not run on these
            return None
    out: list[bool | None] = []
    for c in conditions:
        v = np.asarray(got.get(c)).reshape(-1)
        out.append(bool(v[0]) if v.size == 1 else None)
    return out


def _probe(original: ModelProto, outputs: list[str]) -> object:
    """An onnxruntime session of a copy of `original` whose outputs are `outputs` (main-graph
    values), with the nodes no output needs left out; None where onnxruntime cannot load it
    (True where there is no output: every condition is a graph input)."""
    from eqsat.backends.ort.sessions import session

    if not outputs:
        return True
    need, keep = set(outputs), []
    for n in reversed(original.graph.node):
        if any(o in need for o in n.output):
            keep.append(n)
            need |= {i for i in n.input if i} | _outer_reads(n)
    m = ModelProto()
    m.CopyFrom(original)
    del m.graph.node[:]
    m.graph.node.extend(reversed(keep))
    del m.graph.output[:]
    m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(o) for o in outputs)
    try:
        return session(m, False)
    except Exception:  # noqa: BLE001 - a model onnxruntime runs only in stages, ...: no such draws
        return None


def _outer_reads(n: onnx.NodeProto) -> set[str]:
    """Every name the bodies of `n` (nested ones too) read: the outer values among them."""
    out: set[str] = set()
    for a in n.attribute:
        for body in subgraphs(a):
            for inner in body.node:
                out |= {i for i in inner.input if i} | _outer_reads(inner)
    return out
