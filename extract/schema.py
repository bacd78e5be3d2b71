"""What a serialized e-graph must hold, checked field by field before anything reads it.

egraph-serialize JSON (egglog's) plus eqsat's metadata (eqsat/core/serialize.py):

    {"nodes": {ID: {"op": str, "eclass": str, "children": [ID, ...],
                    "cost": number >= 0 (optional), "subsumed": bool (optional)}, ...},
     "root_eclasses": [E-CLASS, ...],                                          (optional)
     "class_data": {E-CLASS: {"type": str, "shape": [int, ...], "dtype": str,
                              "unpadded_elements": number > 0, "dequantized": bool}, ...},
                                     (optional; required with "eqsat")
     "eqsat": {                                                                (optional)
        "format": int >= 1, "constructors": [str], "functions": [str], "forbidden": [str],
        "roots": [E-CLASS], "outputs": [str], "dims": {"<negative int>": NAME},
        "value_class": {str: E-CLASS}, "node_weight": {ID: number > 0},
        "measured_us": {ID: number >= 0},
        "settings": {"hardware": str, "dims": {NAME: int > 0}, ...}}}

Every field here is one some part of eqsat reads; the ones it does not read (egglog's own
extras, `settings` it only compares) are left alone. Numbers are finite: a NaN or infinite
cost would make every extraction meaningless. `validate` raises EGraphFormatError naming
the first bad field as a path into the file: `nodes["12"].cost: expected a number >= 0,
got "x"`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

FORMAT = 1  # the newest `eqsat.format` this reader knows (eqsat/core/serialize.py writes it)


class EGraphFormatError(ValueError):
    """A field of a serialized e-graph (or a choice file) does not hold what it must; the
    message is `FIELD: expected WHAT, got VALUE`, FIELD a path into the file, `field` that
    path ("" for the file as a whole) and `missing` whether the field is absent."""

    def __init__(self, field: str, expected: str, got=None, *, missing: bool = False) -> None:
        self.field = field
        self.missing = missing
        shown = "nothing" if missing else show(got)
        super().__init__(f"{field + ': ' if field else ''}expected {expected}, got {shown}")


class NewerFormatError(ValueError):
    """The file was written by a newer eqsat than this reader."""


def show(value, limit: int = 60) -> str:
    """A value as the JSON it was read from (strings quoted, NaN as NaN), shortened."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def key(field: str, k: str) -> str:
    """The path of entry `k` of the object at `field`: `nodes["12"]`."""
    return f"{field}[{json.dumps(k)}]"


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def need_object(v, field: str, expected: str = "an object") -> dict:
    if not isinstance(v, dict):
        raise EGraphFormatError(field, expected, v)
    return v


def need_str(v, field: str, expected: str = "a string") -> str:
    if not isinstance(v, str):
        raise EGraphFormatError(field, expected, v)
    return v


def need_strings(v, field: str, expected: str = "a list of strings", each: str = "a string") -> list:
    if not isinstance(v, list):
        raise EGraphFormatError(field, expected, v)
    for i, s in enumerate(v):
        if not isinstance(s, str):
            raise EGraphFormatError(f"{field}[{i}]", each, s)
    return v


def need_numbers(v, field: str, ok: Callable[[float], bool], expected: str) -> None:
    """An object whose values are finite numbers that `ok` accepts."""
    for k, x in need_object(v, field).items():
        if not (is_number(x) and ok(x)):
            raise EGraphFormatError(key(field, k), expected, x)


def positive_sizes(v, field: str) -> dict:
    """{NAME: int > 0}: the sizes of symbolic dimensions, as `--dim` gives them."""
    for k, x in need_object(v, field).items():
        if not (is_int(x) and x > 0):
            raise EGraphFormatError(key(field, k), "an integer > 0", x)
    return v


def check_format(meta: dict) -> None:
    """`eqsat.format`: a version number this reader knows (NewerFormatError if newer)."""
    fmt = meta.get("format", FORMAT)
    if not (is_int(fmt) and fmt >= 1):
        raise EGraphFormatError("eqsat.format", "an integer >= 1", fmt)
    if fmt > FORMAT:
        raise NewerFormatError(f"e-graph format {fmt} is newer than this reader's ({FORMAT}): "
                               "read it with the eqsat that wrote it")


def validate(data) -> None:
    """Raise EGraphFormatError (or NewerFormatError) unless `data` is a serialized e-graph
    whose every field eqsat reads has the type and range the module docstring gives."""
    if not isinstance(data, dict):
        raise EGraphFormatError("", "an e-graph: a JSON object with \"nodes\"", data)
    meta = need_object(data.get("eqsat", {}), "eqsat")
    check_format(meta)  # first: a newer file may differ in any other field
    if "nodes" not in data:
        raise EGraphFormatError("nodes", "an object (node id -> node)", missing=True)
    nodes = need_object(data["nodes"], "nodes", "an object (node id -> node)")
    classes = _well_formed_nodes(nodes)
    if classes is None:  # say which field
        classes = _nodes(nodes)
    if "root_eclasses" in data:
        _roots(data["root_eclasses"], "root_eclasses", classes)
    if meta and "class_data" not in data:  # eqsat writes it: a file without it was cut
        raise EGraphFormatError("class_data", "an object (e-class -> its type, shape and dtype), as eqsat "
                                "writes it", missing=True)
    cd = need_object(data.get("class_data", {}), "class_data")
    if not _well_formed_class_data(cd):
        _class_data(cd)
    _meta(meta, classes)


# The whole e-graph is checked on every read (the oracle reads a snapshot every round): these
# two passes accept a well-formed one at about a fifth of the cost of building it; only where
# they find a fault do the detailed checks below run, to name it. They may refuse what the
# detailed checks accept (a subclass of float from a Python caller): those then decide.

def _well_formed_nodes(nodes: dict) -> set[str] | None:
    """The e-classes, or None if some node may be malformed."""
    classes: set[str] = set()
    add = classes.add
    for n in nodes.values():
        if type(n) is not dict:
            return None
        op, ec, kids = n.get("op"), n.get("eclass"), n.get("children")
        if type(op) is not str or type(ec) is not str or type(kids) is not list:
            return None
        for c in kids:
            if type(c) is not str or c not in nodes:
                return None
        c = n.get("cost", 1.0)
        if (type(c) is not float and type(c) is not int) or not 0 <= c < math.inf:
            return None
        if type(n.get("subsumed", False)) is not bool:
            return None
        add(ec)
    return classes


def _well_formed_class_data(cd: dict) -> bool:
    for d in cd.values():
        if type(d) is not dict or type(d.get("type", "")) is not str or type(d.get("dtype", "")) is not str:
            return False
        if "unpadded_elements" in d and not (is_number(d["unpadded_elements"]) and d["unpadded_elements"] > 0):
            return False
        if type(d.get("dequantized", False)) is not bool:
            return False
        shape = d.get("shape")
        if shape is not None:
            if type(shape) is not list:
                return False
            for x in shape:
                if type(x) is not int:
                    return False
    return True


def _nodes(nodes: dict) -> set[str]:
    classes: set[str] = set()
    for nid, n in nodes.items():
        where = key("nodes", nid)
        if not isinstance(n, dict):
            raise EGraphFormatError(where, "an object", n)
        for f in ("op", "eclass"):
            v = n.get(f)
            if not isinstance(v, str):
                raise EGraphFormatError(f"{where}.{f}", "a string", v, missing=f not in n)
        kids = n.get("children")
        if not isinstance(kids, list):
            raise EGraphFormatError(f"{where}.children", "a list of node ids", kids, missing="children" not in n)
        for i, c in enumerate(kids):
            if not isinstance(c, str) or c not in nodes:
                raise EGraphFormatError(f"{where}.children[{i}]", 'the id of a node in "nodes"', c)
        if "cost" in n and not (is_number(n["cost"]) and n["cost"] >= 0):
            raise EGraphFormatError(f"{where}.cost", "a number >= 0", n["cost"])
        if "subsumed" in n and not isinstance(n["subsumed"], bool):
            raise EGraphFormatError(f"{where}.subsumed", "true or false", n["subsumed"])
        classes.add(n["eclass"])
    return classes


def _roots(v, field: str, classes: set[str]) -> None:
    need_strings(v, field, "a list of e-class names", "an e-class name")
    for i, c in enumerate(v):
        if c not in classes:
            raise EGraphFormatError(f"{field}[{i}]", "an e-class of the e-graph", c)


def _class_data(cd: dict) -> None:
    for c, d in cd.items():
        where = key("class_data", c)
        need_object(d, where)
        for f in ("type", "dtype"):
            if f in d:
                need_str(d[f], f"{where}.{f}")
        if "unpadded_elements" in d and not (is_number(d["unpadded_elements"]) and d["unpadded_elements"] > 0):
            raise EGraphFormatError(f"{where}.unpadded_elements", "a number > 0", d["unpadded_elements"])
        if "dequantized" in d and type(d["dequantized"]) is not bool:
            raise EGraphFormatError(f"{where}.dequantized", "true or false", d["dequantized"])
        if "shape" in d:
            shape = d["shape"]
            if not isinstance(shape, list):
                raise EGraphFormatError(f"{where}.shape", "a list of integers", shape)
            for i, x in enumerate(shape):
                if not is_int(x):
                    raise EGraphFormatError(f"{where}.shape[{i}]", "an integer", x)


def _meta(meta: dict, classes: set[str]) -> None:
    for f in ("constructors", "functions", "forbidden", "outputs"):
        if f in meta:
            need_strings(meta[f], f"eqsat.{f}")
    if "roots" in meta:
        _roots(meta["roots"], "eqsat.roots", classes)
    for k, name in need_object(meta.get("dims", {}), "eqsat.dims").items():
        try:
            int(k)
        except ValueError:
            raise EGraphFormatError(key("eqsat.dims", k), "a key that is a (negative) integer, the dimension's id",
                                    k) from None
        need_str(name, key("eqsat.dims", k), "a dimension name (a string)")
    for k, c in need_object(meta.get("value_class", {}), "eqsat.value_class").items():
        need_str(c, key("eqsat.value_class", k), "an e-class name")
    if "input_complete" in meta and not isinstance(meta["input_complete"], bool):
        raise EGraphFormatError("eqsat.input_complete", "true or false", meta["input_complete"])
    if "input_nodes" in meta:
        need_strings(meta["input_nodes"], "eqsat.input_nodes")
    if "node_weight" in meta:
        need_numbers(meta["node_weight"], "eqsat.node_weight", lambda x: x > 0, "a number > 0")
    if "measured_us" in meta:
        need_numbers(meta["measured_us"], "eqsat.measured_us", lambda x: x >= 0, "a number >= 0")
    settings = need_object(meta.get("settings", {}), "eqsat.settings")
    if "hardware" in settings:
        h = settings["hardware"]
        if not isinstance(h, str) or not h:
            raise EGraphFormatError("eqsat.settings.hardware", "a hardware profile's name or path", h)
    if "dims" in settings:
        positive_sizes(settings["dims"], "eqsat.settings.dims")
