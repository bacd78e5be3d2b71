"""Sizes for the symbolic dimensions of a benchmark model's graph inputs: a name containing
`batch` -> 1, containing `seq` -> 128 (shared by peers.py and memory.py). A KV-cache step
(corpus.py's `*-kv` models) decodes one new token after 128 cached: `past` -> 128, `total`
-> 129, `new_tokens` -> 1 (matched first: `past_sequence` holds `seq` too)."""

from __future__ import annotations

DIM_HINTS = (("batch", 1), ("past", 128), ("total", 129), ("new_tokens", 1), ("seq", 128))


def dims_for(model, unknown: int | None = 1) -> dict[str, int]:
    """Each symbolic dim of the non-initializer graph inputs -> its size from DIM_HINTS; a name
    no hint matches gets `unknown`, or stops the run when `unknown` is None."""
    inits = {t.name for t in model.graph.initializer}
    dims: dict[str, int] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                v = next((v for hint, v in DIM_HINTS if hint in d.dim_param.lower()), unknown)
                if v is None:
                    raise SystemExit(f"no size for symbolic dimension {d.dim_param!r}")
                dims[d.dim_param] = v
    return dims
