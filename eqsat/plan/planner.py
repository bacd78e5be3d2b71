"""The planner: order, in-place reuse and views, offsets; the Plan and its JSON form.

`plan_graph` evaluates every candidate order (eqsat.plan.order) exactly: lifetimes, then
in-place reuse and views, then the lower bound over the resulting buffers. It keeps the
order with the lowest lower bound (the model's order on ties, so the lower bound is never
above the model order's). For that order it places the buffers with every heuristic of
eqsat.plan.arena, improves the best placement with `repack` (a local search, never worse),
once with in-place reuse and once without (views are always shared), and keeps the smallest
arena (in-place on ties).

Figures in a plan (all bytes):

- `arena_bytes`: the arena the plan needs.
- `lower_bound_bytes`: the largest sum of simultaneously live buffers (aligned sizes,
  in-place reuse and views applied) in the chosen order: no arena for this order can be
  smaller. `model_order_lower_bound_bytes`: the same in the model's order.
- `no_reuse_bytes`: every intermediate in a buffer of its own (the sum of their aligned
  sizes).
- `inplace_saved_bytes`: the best arena without in-place reuse (views still shared, same
  order) minus `arena_bytes`; never negative, since the planner keeps the plan without
  in-place reuse when that is smaller. `inplace_bytes` and `view_bytes` add up the sizes of
  the tensors that took another tensor's buffer in place or as a view.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import ModelProto, helper

from eqsat.errors import UsageError
from eqsat.plan.arena import HEURISTICS, place, repack
from eqsat.plan.graph import Graph, graph_from_model, value_dependent_sizes
from eqsat.plan.inplace import Alias, aliases, buffers
from eqsat.plan.lifetimes import Buffer, check_order, lifetimes, lower_bound
from eqsat.plan.order import ORDERS, candidate_orders

FORMAT = "eqsat-memory-plan"
VERSION = 1


@dataclass
class PlannedTensor:
    name: str
    offset: int
    size: int
    first_use: int
    last_use: int
    dtype: str = ""
    shape: tuple[int, ...] = ()
    alias_of: str | None = None
    alias_kind: str | None = None  # view | inplace
    shape_source: str = "inferred"

    def as_dict(self) -> dict:
        d = {"name": self.name, "offset": self.offset, "size": self.size, "first_use": self.first_use,
             "last_use": self.last_use, "dtype": self.dtype, "shape": list(self.shape)}
        if self.alias_of is not None:
            d["alias_of"] = self.alias_of
            d["alias_kind"] = self.alias_kind
        if self.shape_source != "inferred":
            d["shape_source"] = self.shape_source
        return d


@dataclass
class Plan:
    alignment: int
    arena_bytes: int
    lower_bound_bytes: int
    model_order_lower_bound_bytes: int
    model_order_arena_bytes: int
    no_reuse_bytes: int
    no_inplace_arena_bytes: int
    inplace_saved_bytes: int
    inplace: bool  # whether the plan uses in-place reuse
    inplace_bytes: int
    view_bytes: int
    heuristic: str
    repack_saved_bytes: int
    order_heuristic: str
    order: list[str]
    tensors: list[PlannedTensor]
    dims: dict[str, int] = field(default_factory=dict)
    generated_names: list[str] = field(default_factory=list)
    orders: dict[str, int] = field(default_factory=dict)  # candidate order -> lower bound
    heuristics: dict[str, int] = field(default_factory=dict)  # heuristic -> arena (chosen order and reuse)
    value_dependent: dict[str, str] = field(default_factory=dict)  # tensor -> node its size comes from
    graph: Graph | None = field(default=None, repr=False, compare=False)
    order_index: list[int] = field(default_factory=list, repr=False, compare=False)

    @property
    def ratio(self) -> float:
        """arena / lower bound (1.0 is optimal for the order)."""
        return self.arena_bytes / self.lower_bound_bytes if self.lower_bound_bytes else 1.0

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "arena_bytes": self.arena_bytes,
            "lower_bound_bytes": self.lower_bound_bytes,
            "no_reuse_bytes": self.no_reuse_bytes,
            "inplace_saved_bytes": self.inplace_saved_bytes,
            "model_order_lower_bound_bytes": self.model_order_lower_bound_bytes,
            "model_order_arena_bytes": self.model_order_arena_bytes,
            "no_inplace_arena_bytes": self.no_inplace_arena_bytes,
            "inplace": self.inplace,
            "inplace_bytes": self.inplace_bytes,
            "view_bytes": self.view_bytes,
            "alignment": self.alignment,
            "heuristic": self.heuristic,
            "repack_saved_bytes": self.repack_saved_bytes,
            "order_heuristic": self.order_heuristic,
            "heuristics": self.heuristics,
            "orders": self.orders,
            "dims": self.dims,
            "generated_names": self.generated_names,
            "value_dependent_sizes": self.value_dependent,
            "order": self.order,
            "tensors": [t.as_dict() for t in self.tensors],
        }

    def summary(self) -> list[str]:
        b = _human
        lines = [
            f"arena {b(self.arena_bytes)} ({self.arena_bytes} bytes), {self.ratio:.3f}x the lower bound "
            f"{b(self.lower_bound_bytes)}",
            f"order: {self.order_heuristic} (lower bound {b(self.lower_bound_bytes)}; model order "
            f"{b(self.model_order_lower_bound_bytes)})",
            f"placement: {self.heuristic}{', repacked' if self.repack_saved_bytes else ''}; "
            f"no reuse {b(self.no_reuse_bytes)}; in-place reuse saves {b(self.inplace_saved_bytes)}",
            f"{len(self.tensors)} tensors, {len(self.order)} nodes, alignment {self.alignment}",
        ]
        if self.generated_names:
            lines.append(f"{len(self.generated_names)} unnamed nodes got generated names (OPTYPE_INDEX)")
        return lines

    def warnings(self) -> list[str]:
        """What the user must know before trusting the plan for every input."""
        return plan_warnings({"value_dependent_sizes": self.value_dependent})


def plan_warnings(d: dict) -> list[str]:
    """The warnings of a plan's dict (Plan.to_dict): sizes that hold for the measuring run's
    inputs only."""
    dep = d.get("value_dependent_sizes") or {}
    if not dep:
        return []
    names = list(dep)
    origins = sorted(set(dep.values()))
    return [f"the sizes of {len(names)} tensor(s) ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''}) "
            f"depend on input values (from {', '.join(origins[:3])}{', ...' if len(origins) > 3 else ''}): "
            "measured on one random input, the plan holds only for inputs that give the same sizes"]


def _human(n: int) -> str:
    if n >= 1 << 40:
        return f"{n / (1 << 40):.2f} TiB"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def _dtype_name(elem: int) -> str:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem)).name if elem else ""


def _best(bufs: list[Buffer], names: list[str], lb: int, improve: bool = True, tries: int = 3
          ) -> tuple[str, list[int], int, dict[str, int], int]:
    """The best placement: (heuristic, offsets, arena, arena per heuristic, bytes repack saved).
    The `tries` smallest greedy arenas are repacked, until one reaches the lower bound."""
    table: dict[str, int] = {}
    results = []
    for h in names:
        offs, arena = place(bufs, h)
        table[h] = arena
        results.append((arena, names.index(h), h, offs))
    results.sort(key=lambda r: r[:2])
    arena0, _, h, offs = results[0]
    best = (h, offs, arena0, 0)
    if improve:
        for greedy, _, name, o in results[:tries]:
            if best[2] <= lb:
                break
            o2, a2 = repack(bufs, o, lb)
            if a2 < best[2]:
                best = (name, o2, a2, greedy - a2)
    return best[0], best[1], best[2], table, best[3]


def _checked_options(alignment: int, orders: list[str] | None,
                     heuristics: list[str] | None) -> tuple[list[str], list[str]]:
    """(placement heuristics, order heuristics with "model" first) to try; UsageError for a bad option."""
    if not isinstance(alignment, int) or alignment <= 0:
        raise UsageError(f"alignment must be a positive integer, not {alignment!r}")
    hnames = list(heuristics or HEURISTICS)
    for h in hnames:
        if h not in HEURISTICS:
            raise UsageError(f"unknown placement heuristic {h!r}; known: {', '.join(HEURISTICS)}")
    onames = ["model", *[o for o in (orders or list(ORDERS)) if o != "model"]]
    for o in onames:
        if o not in ORDERS:
            raise UsageError(f"unknown order heuristic {o!r}; known: {', '.join(ORDERS)}")
    return hnames, onames


def _planned_tensors(graph: Graph, life: dict[str, tuple[int, int]], al: dict[str, Alias], bufs: list[Buffer],
                     offs: list[int]) -> list[PlannedTensor]:
    """Every intermediate tensor at its buffer's offset, in order of first use (then output position)."""
    offset: dict[str, int] = {}
    for b, off in zip(bufs, offs, strict=True):
        for t in b.members:
            offset[t] = off
    tensors: list[PlannedTensor] = []
    for t in sorted(graph.tensors, key=lambda t: (life[t][0], graph.nodes[graph.tensors[t].producer].outputs.index(t))):
        info = graph.tensors[t]
        a: Alias | None = al.get(t)
        tensors.append(PlannedTensor(t, offset[t], info.size, life[t][0], life[t][1], _dtype_name(info.elem_type),
                                     tuple(info.shape), a.parent if a else None, a.kind if a else None,
                                     info.shape_source))
    return tensors


def plan_graph(graph: Graph, alignment: int = 64, inplace: bool = True, views: bool = True,
               orders: list[str] | None = None, heuristics: list[str] | None = None, improve: bool = True) -> Plan:
    """Plan `graph`; see the module docstring for how the order, reuse and offsets are chosen."""
    hnames, onames = _checked_options(alignment, orders, heuristics)

    def evaluate(order: list[int], use_inplace: bool):
        life = lifetimes(graph, order)
        al = aliases(graph, order, life, inplace=use_inplace, views=views)
        bufs = buffers(graph, life, al, alignment)
        return life, al, bufs, lower_bound(bufs)

    cands = candidate_orders(graph, alignment, onames)
    lbs: dict[str, int] = {}
    chosen = "model"
    for name, order in cands.items():
        check_order(graph, order)
        lbs[name] = evaluate(order, inplace)[3]
        if lbs[name] < lbs[chosen]:
            chosen = name
    order = cands[chosen]

    configs = [True, False] if inplace else [False]
    results = {}
    for use in configs:
        life, al, bufs, lb = evaluate(order, use)
        results[use] = (life, al, bufs, lb, *_best(bufs, hnames, lb, improve))
    use = min(configs, key=lambda u: (results[u][6], not u))
    life, al, bufs, _, h, offs, arena, table, repacked = results[use]
    lb = lbs[chosen]
    no_inplace_arena = results[False][6]

    if chosen == "model":
        model_arena = arena
    else:
        m_order = cands["model"]
        model_arena = min(_best(e[2], hnames, e[3], improve)[2] for e in (evaluate(m_order, u) for u in configs))

    tensors = _planned_tensors(graph, life, al, bufs, offs)
    no_reuse = sum(-(-i.size // alignment) * alignment for i in graph.tensors.values())
    return Plan(
        alignment=alignment,
        arena_bytes=arena,
        lower_bound_bytes=lb,
        model_order_lower_bound_bytes=lbs["model"],
        model_order_arena_bytes=model_arena,
        no_reuse_bytes=no_reuse,
        no_inplace_arena_bytes=no_inplace_arena,
        inplace_saved_bytes=no_inplace_arena - arena,
        inplace=use,
        inplace_bytes=sum(graph.tensors[t].size for t, a in al.items() if a.kind == "inplace"),
        view_bytes=sum(graph.tensors[t].size for t, a in al.items() if a.kind == "view"),
        heuristic=h,
        repack_saved_bytes=repacked,
        order_heuristic=chosen,
        order=[graph.nodes[i].name for i in order],
        tensors=tensors,
        dims=dict(graph.dims),
        generated_names=list(graph.generated_names),
        orders=lbs,
        heuristics=table,
        value_dependent=value_dependent_sizes(graph),
        graph=graph,
        order_index=list(order),
    )


def plan_model(model: ModelProto, dims: dict[str, int] | None = None, alignment: int = 64, inplace: bool = True,
               views: bool = True, orders: list[str] | None = None, heuristics: list[str] | None = None,
               improve: bool = True) -> Plan:
    """Plan an ONNX model (normally the optimized one). `dims` binds symbolic dimensions."""
    return plan_graph(graph_from_model(model, dims), alignment, inplace, views, orders, heuristics, improve)
