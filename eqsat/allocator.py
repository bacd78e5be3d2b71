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

Only the `eqsat` program calls it (eqsat.cli.run), never a library user's process. It does
nothing where the C library is not glibc, or where the user tunes glibc's allocator already
(a MALLOC_* variable, or glibc.malloc in GLIBC_TUNABLES): `MALLOC_MMAP_MAX_=65536 eqsat ...`
keeps glibc's defaults.
"""

from __future__ import annotations

import ctypes
import os
import sys
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def user_tuned(environ) -> bool:
    """Whether the environment sets glibc's allocator: the user's settings win."""
    return (any(k.startswith("MALLOC_") for k in environ)
            or "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""))


_reusing = False


def reuse_freed_memory() -> bool:
    """Whether glibc took the settings."""
    global _reusing
    if not sys.platform.startswith("linux") or user_tuned(os.environ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):  # no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; a trim threshold of -1 turns trimming off (mallopt(3)).
    _reusing = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, -1))
    return _reusing


@contextmanager
def mapped():
    """Within the block, large buffers come from mmap again (glibc's default), and go back to
    the system when freed: for a buffer grown by doubling (protobuf's serialization), which
    in the heap leaves every smaller copy behind as a hole and raises the peak."""
    if not _reusing:
        yield
        return
    mallopt = ctypes.CDLL(None).mallopt
    mallopt(M_MMAP_MAX, 65536)
    try:
        yield
    finally:
        mallopt(M_MMAP_MAX, 0)
