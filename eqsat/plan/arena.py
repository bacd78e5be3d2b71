"""Offsets of buffers in one arena: interval packing heuristics.

Each buffer has a size (already aligned) and a lifetime [start, end] in steps; two buffers
whose lifetimes overlap must get disjoint byte ranges. Every heuristic takes the buffers in
some order and places each one, among the already placed buffers whose lifetimes overlap
its own, in a gap between them (or above the highest of them when no gap fits). Sizes and
offsets are multiples of the alignment, so every offset is aligned.

- `greedy-by-size` (Pisarchyk & Lee 2020, "Efficient Memory Management for Deep Neural Net
  Inference"; TFLite's and XLA's default): largest buffer first; best fit, the smallest gap
  that holds the buffer (the lowest such gap on ties).
- `greedy-by-size-first-fit`: largest first; the lowest gap that holds it.
- `greedy-by-breadth` (same paper): steps by decreasing breadth (bytes live at the step);
  at each step its unplaced buffers, largest first; best fit.
- `greedy-by-start`: by lifetime start (then larger first), first fit: a linear scan.
- `greedy-by-conflict`: by the bytes of the buffers each one overlaps in time (most
  constrained first), then size; best fit.
- `greedy-long-lived-first`: the buffers live over more than a quarter of the steps first
  (they then sit at the bottom, out of the way of the rest), each group largest first;
  best fit.

The planner runs all of them and improves the three smallest arenas with `repack` (until
one reaches the lower bound), a local search that never makes an arena larger:

1. compaction: every buffer, from the highest top down, moves to the lowest gap that holds
   it (all other buffers fixed);
2. re-placement: each buffer that reaches above the lower bound is taken out with a ring
   of buffers around it and the ring is placed again (the rest fixed) in several orders
   (longest lifetime first, largest first, by start, the offender first), best and first
   fit. The best layout is kept if it lowers the ring's highest top, or keeps it and lowers
   the bytes the ring puts above the lower bound. Rings grow until one helps: the buffers
   within the offender's lifetime widened by half its length; those overlapping it; then,
   hop by hop, those overlapping the span of the previous ring. A ring never holds more
   than a quarter of all buffers, or 64 when that is more; at most 8 hops.

Rounds repeat while (arena, bytes above the lower bound) decreases, at most 20.

Greedy placements lose where the best layout alternates from one layer to the next: in
GPT-2 the residual streams of consecutive layers overlap for a step, so greedy by size
puts every layer's MLP buffers at the same offsets and the residuals ping-pong above
them, 0.39 MB (11%) over the lower bound; the re-placement moves every other residual
below its layer's MLP buffers and the arena reaches the lower bound. In the TorchScript
export a long-lived 0.39 MB buffer (the position embeddings) sits between the layers'
buffers after greedy by size and blocks that move; greedy-long-lived-first puts it at the
bottom and the re-placement then reaches the lower bound there too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from eqsat.plan.lifetimes import Buffer


def _place(seq: list[int], sizes: np.ndarray, starts: np.ndarray, ends: np.ndarray, best_fit: bool) -> np.ndarray:
    n = len(sizes)
    offs = np.zeros(n, np.int64)
    p_start = np.empty(n, np.int64)
    p_end = np.empty(n, np.int64)
    p_off = np.empty(n, np.int64)
    p_top = np.empty(n, np.int64)
    k = 0
    for i in seq:
        z = int(sizes[i])
        if z == 0:
            continue  # an empty buffer needs no bytes: offset 0
        s, e = starts[i], ends[i]
        m = (p_start[:k] <= e) & (p_end[:k] >= s)
        if not m.any():
            off = 0
        else:
            o = p_off[:k][m]
            top = p_top[:k][m]
            srt = np.argsort(o, kind="stable")
            o, top = o[srt], top[srt]
            reach = np.maximum.accumulate(top)  # highest byte used below each placed buffer's offset
            prev = np.empty_like(reach)
            prev[0] = 0
            prev[1:] = reach[:-1]
            gaps = o - prev
            fit = np.flatnonzero(gaps >= z)
            if len(fit):
                j = fit[int(np.argmin(gaps[fit]))] if best_fit else fit[0]
                off = int(prev[j])
            else:
                off = int(reach[-1])
        offs[i] = off
        p_start[k], p_end[k], p_off[k], p_top[k] = s, e, off, off + z
        k += 1
    return offs


def _fit(i: int, offs: np.ndarray, placed: np.ndarray, sizes: np.ndarray, starts: np.ndarray,
         ends: np.ndarray, best_fit: bool) -> int:
    """Where buffer i goes among the placed buffers overlapping it in time."""
    z = sizes[i]
    if z == 0:
        return 0
    m = placed & (starts <= ends[i]) & (ends >= starts[i]) & (sizes > 0)
    m[i] = False
    if not m.any():
        return 0
    o = offs[m]
    top = o + sizes[m]
    srt = np.argsort(o, kind="stable")
    o, top = o[srt], top[srt]
    reach = np.maximum.accumulate(top)
    prev = np.concatenate(([0], reach[:-1]))
    gaps = o - prev
    f = np.flatnonzero(gaps >= z)
    if len(f):
        j = f[int(np.argmin(gaps[f]))] if best_fit else f[0]
        return int(prev[j])
    return int(reach[-1])


def _replace(b: int, ring: np.ndarray, offs: np.ndarray, placed: np.ndarray, sizes: np.ndarray,
             starts: np.ndarray, ends: np.ndarray, dur: np.ndarray, lower_bound: int) -> bool:
    """Take the buffers `ring` out and place them again, the others fixed, in several orders;
    keep the best layout if it lowers their highest top, or keeps it and lowers the bytes
    they put above the lower bound. Returns whether it did."""
    members = ring.tolist()
    old = offs[ring].copy()

    def score() -> tuple[int, int]:
        tops = offs[ring] + sizes[ring]
        return int(tops.max()), int(np.maximum(tops - lower_bound, 0).sum())

    best_top, best = score(), None
    seqs = [
        sorted(members, key=lambda i: (-dur[i], -sizes[i], i)),
        sorted(members, key=lambda i: (-sizes[i], -dur[i], i)),
        sorted(members, key=lambda i: (starts[i], -sizes[i], i)),
        [b, *sorted((i for i in members if i != b), key=lambda i: (-sizes[i], -dur[i], i))],
    ]
    for seq in seqs:
        for best_fit in (True, False):
            placed[ring] = False
            for i in seq:
                offs[i] = _fit(i, offs, placed, sizes, starts, ends, best_fit)
                placed[i] = True
            top = score()
            if top < best_top:
                best_top, best = top, offs[ring].copy()
    offs[ring] = best if best is not None else old
    return best is not None


def _rings(b: int, sizes: np.ndarray, starts: np.ndarray, ends: np.ndarray, dur: np.ndarray, hops: int = 8):
    """Growing sets of buffers around buffer b to take out and place again: those within b's
    lifetime widened by half its length; those overlapping it; then, hop by hop, those
    overlapping the span of the previous set, up to a quarter of all buffers (at least 64)."""
    w = max(1, int(dur[b]) // 2)
    cap = max(64, len(sizes) // 4)
    inside = np.flatnonzero((starts >= starts[b] - w) & (ends <= ends[b] + w))
    if len(inside) <= cap:
        yield inside
    lo, hi = starts[b], ends[b]
    prev = -1
    for _ in range(hops):
        ring = np.flatnonzero((starts <= hi) & (ends >= lo))
        if len(ring) == prev or len(ring) > cap:
            return
        yield ring
        prev = len(ring)
        lo, hi = starts[ring].min(), ends[ring].max()


def repack(bufs: list[Buffer], offsets: list[int], lower_bound: int, rounds: int = 20) -> tuple[list[int], int]:
    """Improve a placement (see the module docstring); returns (offsets, arena)."""
    if not bufs:
        return [], 0
    sizes, starts, ends = _arrays(bufs)
    offs = np.array(offsets, np.int64)
    n = len(sizes)
    placed = np.ones(n, bool)
    dur = ends - starts

    def potential() -> tuple[int, int]:  # (arena, bytes above the lower bound, summed over buffers)
        tops = offs + sizes
        return int(tops.max()), int(np.maximum(tops - lower_bound, 0).sum())

    for _ in range(rounds):
        before = potential()
        if before[0] <= lower_bound:
            break
        for i in sorted(range(n), key=lambda i: (-(offs[i] + sizes[i]), i)):
            placed[i] = False
            o = _fit(i, offs, placed, sizes, starts, ends, False)
            if o < offs[i]:
                offs[i] = o
            placed[i] = True
        for b in sorted(range(n), key=lambda i: (-sizes[i], i)):
            if offs[b] + sizes[b] <= lower_bound:
                continue
            for ring in _rings(b, sizes, starts, ends, dur):
                if _replace(b, ring, offs, placed, sizes, starts, ends, dur, lower_bound):
                    break
        if potential() >= before:
            break
    return offs.tolist(), int((offs + sizes).max())


def _arrays(bufs: list[Buffer]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.array([b.size for b in bufs], np.int64), np.array([b.start for b in bufs], np.int64),
            np.array([b.end for b in bufs], np.int64))


def _by_size(sizes, starts, ends) -> list[int]:
    return sorted(range(len(sizes)), key=lambda i: (-sizes[i], starts[i], i))


def _by_breadth(sizes, starts, ends) -> list[int]:
    if not len(sizes):
        return []
    horizon = int(ends.max()) + 2
    delta = np.zeros(horizon, np.int64)
    np.add.at(delta, starts, sizes)
    np.add.at(delta, ends + 1, -sizes)
    breadth = np.cumsum(delta)
    by_start: dict[int, list[int]] = {}
    for i in range(len(sizes)):
        by_start.setdefault(int(starts[i]), []).append(i)
    done = np.zeros(len(sizes), bool)
    seq: list[int] = []
    for step in sorted(range(horizon - 1), key=lambda t: (-breadth[t], t)):
        live = np.flatnonzero((starts <= step) & (ends >= step) & ~done)
        for i in sorted(live.tolist(), key=lambda i: (-sizes[i], starts[i], i)):
            seq.append(i)
        done[live] = True
    return seq


def _by_start(sizes, starts, ends) -> list[int]:
    return sorted(range(len(sizes)), key=lambda i: (starts[i], -sizes[i], i))


def _by_conflict(sizes, starts, ends) -> list[int]:
    n = len(sizes)
    if not n:
        return []
    # bytes of the buffers overlapping each one in time, by a sweep over start/end order
    conflict = np.zeros(n, np.int64)
    order_s = np.argsort(starts, kind="stable")
    cum = np.concatenate(([0], np.cumsum(sizes[order_s])))
    st_sorted = starts[order_s]
    order_e = np.argsort(ends, kind="stable")
    cum_e = np.concatenate(([0], np.cumsum(sizes[order_e])))
    en_sorted = ends[order_e]
    for i in range(n):
        started = cum[np.searchsorted(st_sorted, ends[i], side="right")]  # start <= my end
        ended = cum_e[np.searchsorted(en_sorted, starts[i], side="left")]  # end < my start
        conflict[i] = started - ended
    return sorted(range(n), key=lambda i: (-conflict[i], -sizes[i], starts[i], i))


def _long_lived_first(sizes, starts, ends) -> list[int]:
    horizon = int(ends.max()) + 1 if len(ends) else 1
    return sorted(range(len(sizes)), key=lambda i: (ends[i] - starts[i] <= horizon // 4, -sizes[i], starts[i], i))


HEURISTICS: dict[str, tuple[Callable, bool]] = {
    "greedy-by-size": (_by_size, True),
    "greedy-long-lived-first": (_long_lived_first, True),
    "greedy-by-size-first-fit": (_by_size, False),
    "greedy-by-breadth": (_by_breadth, True),
    "greedy-by-start": (_by_start, False),
    "greedy-by-conflict": (_by_conflict, True),
}


def place(bufs: list[Buffer], heuristic: str = "greedy-by-size") -> tuple[list[int], int]:
    """Offsets of `bufs` (in their order) by one heuristic, and the arena size."""
    if heuristic not in HEURISTICS:
        raise ValueError(f"unknown placement heuristic {heuristic!r}; known: {', '.join(HEURISTICS)}")
    if not bufs:
        return [], 0
    sizes, starts, ends = _arrays(bufs)
    key, best_fit = HEURISTICS[heuristic]
    offs = _place(key(sizes, starts, ends), sizes, starts, ends, best_fit)
    return offs.tolist(), int((offs + sizes).max())


def place_intervals(sizes: list[int], starts: list[int], ends: list[int],
                    heuristic: str = "greedy-by-size") -> tuple[list[int], int]:
    """`place` for bare intervals (sizes already aligned)."""
    bufs = [Buffer(str(i), [str(i)], z, s, e) for i, (z, s, e) in enumerate(zip(sizes, starts, ends, strict=True))]
    return place(bufs, heuristic)
