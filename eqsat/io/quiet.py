"""Native code's messages kept off the user's terminal.

egglog's Rust panic hook prints the panic's message (and, with RUST_BACKTRACE set, a
backtrace) to file descriptor 2 before Python sees the exception, which carries the same
message; eqsat turns that exception into its one error line. `native_stderr()` sends fd 2
to a scratch file while native code runs, so that the error line is all the user sees.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def native_stderr() -> Iterator[None]:
    """File descriptor 2 goes to a scratch file for the duration (Python's own sys.stderr is
    flushed first and restored with it). Nothing that must be seen may be printed inside."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no fd 2 (a closed stderr): nothing to keep off
        yield
        return
    try:
        with tempfile.TemporaryFile() as scratch:
            os.dup2(scratch.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
