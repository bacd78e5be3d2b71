"""Sizes for the symbolic dimensions of a benchmark model's graph inputs: a name containing
`batch` -> 1, containing `seq` -> 128, `height` or `width` -> 224 (an image's; shared by peers.py, ab.py,
op_profile.py and
memory.py). A KV-cache step (corpus.py's `*-kv` models) decodes one new token after 128
cached: `past` -> 128, `new_tokens` -> 1 (matched before `seq`: `past_sequence` holds it),
and a `total` dimension is past + new (`kv_total`), after any sizes the user gives."""

from __future__ import annotations

DIM_HINTS = (("batch", 1), ("past", 128), ("new_tokens", 1), ("seq", 128), ("height", 224), ("width", 224))


def kv_total(dims: dict[str, int], given: frozenset[str] | set[str] = frozenset()) -> dict[str, int]:
    """`dims` with each dimension named `total...` that is not in `given` set to past + new
    tokens, where the model has one dimension of each."""
    past = [v for k, v in dims.items() if "past" in k.lower()]
    new = [v for k, v in dims.items() if "new_tokens" in k.lower()]
    if len(past) != 1 or len(new) != 1:
        return dims
    return {k: past[0] + new[0] if "total" in k.lower() and k not in given else v for k, v in dims.items()}


def describe() -> str:
    """The hints in words, for a results page's method line."""
    return ", ".join(f"`{h}` -> {v}" for h, v in DIM_HINTS) + ", `total` = past + new_tokens"


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
    return kv_total(dims)
