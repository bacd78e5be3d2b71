"""glibc's allocator, tuned for the command line: big buffers reused instead of returned.

`eqsat optimize` on a 500 MB model allocates and frees buffers the size of the model a dozen
times: the file's bytes, the parsed model, protobuf's serializations, onnxruntime's copies.
glibc serves each one from a fresh mmap and unmaps it when freed, so every buffer's pages
fault in again, one at a time: about 2 million page faults for GPT-2's step, most of the
command's system time. `reuse_freed_memory` makes glibc serve them from its heap and keep
what is freed for the next one (mallopt: M_MMAP_MAX 0, M_TRIM_THRESHOLD -1). A buffer grown
by doubling would leave its smaller copies behind as holes and raise the peak by a model's
size (BERT-base 2175 -> 2688 MiB), so the save serializes `mapped()`, as before; with that
the peak stays where it was (benchmarks/results/cli_time-memory-reuse.md).

Only the `eqsat` program calls it (eqsat.cli.main.run), never a library user's process. It does
nothing where the C library is not glibc, with EQSAT_REUSE_MEMORY=0 (glibc's defaults), or
where the user sets one of the settings it overrides (`OVERRIDDEN`, `OVERRIDDEN_TUNABLES`).
"""

from __future__ import annotations

import ctypes
import os
import sys
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
GLIBC_DEFAULT_MMAP_MAX = 65536

# What reuse_freed_memory overrides, as environment variables and as GLIBC_TUNABLES names;
# a user who sets one of them keeps it.
OVERRIDDEN = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
OVERRIDDEN_TUNABLES = ("glibc.malloc.mmap_max", "glibc.malloc.trim_threshold",
                       "glibc.malloc.mmap_threshold", "glibc.malloc.top_pad")
OPT_OUT = "EQSAT_REUSE_MEMORY"  # "0": glibc's defaults; "1" or unset: reuse


def user_tuned(environ) -> bool:
    """Whether the environment asks for glibc's defaults (EQSAT_REUSE_MEMORY=0) or sets one
    of the settings eqsat would override: the user's choice wins. Other settings
    (MALLOC_ARENA_MAX, MALLOC_PERTURB_, ...) do not count. EQSAT_REUSE_MEMORY other than
    0, 1 or unset also leaves glibc's defaults: this runs before the command line is read,
    and the command then refuses the value (eqsat.environment.check_environment)."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    return (environ.get(OPT_OUT, "").strip() not in ("", "1") or any(k in environ for k in OVERRIDDEN)
            or any(f"{t}=" in tunables for t in OVERRIDDEN_TUNABLES))


_mallopt = None  # set once reuse_freed_memory has changed the settings


def reuse_freed_memory() -> bool:
    """Whether glibc took the settings (then `mapped` can suspend them)."""
    global _mallopt
    if not sys.platform.startswith("linux") or user_tuned(os.environ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):  # no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; a trim threshold of -1 turns trimming off (mallopt(3)).
    if not mallopt(M_MMAP_MAX, 0):
        return False
    if not mallopt(M_TRIM_THRESHOLD, -1):
        mallopt(M_MMAP_MAX, GLIBC_DEFAULT_MMAP_MAX)
        return False
    _mallopt = mallopt
    return True


@contextmanager
def mapped():
    """Within the block, large buffers come from mmap again, and go back to the system when
    freed: for a buffer grown by doubling (protobuf's serialization), which in the heap leaves
    every smaller copy behind as a hole and raises the peak. A no-op unless
    `reuse_freed_memory` took; process-wide while it lasts, and not to be nested."""
    if _mallopt is None:
        yield
        return
    _mallopt(M_MMAP_MAX, GLIBC_DEFAULT_MMAP_MAX)
    try:
        yield
    finally:
        _mallopt(M_MMAP_MAX, 0)
