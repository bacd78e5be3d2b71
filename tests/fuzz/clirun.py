"""Running the `eqsat` command line and judging how it failed.

`in_process` calls eqsat.cli.main.main (fast: the default rules load once per process); an
exception escaping it is what a user would see as a traceback, and propagates. `isolated`
runs such a call in a long-lived worker process, so that a native crash (an abort in onnx's
shape inference, a segfault) or a hang fails one example instead of killing the test run;
its memory is capped (`limit_memory`).
`subprocess` runs `python -m eqsat` with its own environment (for environment variables
read at import or cached per process).

The contract checked (`assert_clean_failure`): exit code 1 or 2, exactly one line
`eqsat: error: ...` on stderr and it is the last line, no traceback; and (`assert_unchanged`)
the folder holds what it held before: no output, no temporary file or folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess as sp
import sys
from pathlib import Path

ERROR = "eqsat: error:"


def in_process(args: list) -> tuple[int, str, str]:
    from eqsat.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


_POOL: list = []  # the worker: a ProcessPoolExecutor of one spawned process
TIMEOUT = float(os.environ.get("EQSAT_FUZZ_TIMEOUT", "180") or 180)  # seconds for one eqsat call


def limit_memory() -> None:
    """Cap this process's address space ($EQSAT_FUZZ_MEMORY_GB, default 6 GiB, at most a third
    of the machine's memory): a model that makes eqsat allocate without bound (a dimension of
    2^40) fails with a MemoryError or a crash in the worker instead of calling the
    out-of-memory killer on a shared machine."""
    import resource

    gb = float(os.environ.get("EQSAT_FUZZ_MEMORY_GB", "6") or 6)
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        total = 1 << 50
    cap = int(min(gb * (1 << 30), total // 3))
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def in_flight(what: str) -> None:
    """Record the call about to run in $EQSAT_FUZZ_IN_FLIGHT (a campaign that stops a hung
    batch reports it)."""
    path = os.environ.get("EQSAT_FUZZ_IN_FLIGHT")
    if path:
        Path(path).write_text(what[:4000])


def isolated(fn, *args, timeout: float | None = None):
    """fn(*args) in the worker process; its exceptions propagate (with the worker's
    traceback as their cause). AssertionError where the worker dies or takes longer than
    `timeout` seconds (then it is killed and the next call starts a fresh one)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout
    from concurrent.futures.process import BrokenProcessPool

    if not _POOL:
        _POOL.append(ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), initializer=limit_memory))
    pool = _POOL[0]
    in_flight(f"{fn.__name__}{tuple(a if not isinstance(a, bytes) else f'<{len(a)} bytes>' for a in args)}")
    try:
        return pool.submit(fn, *args).result(timeout or TIMEOUT)
    except BrokenProcessPool:
        _POOL.clear()
        raise AssertionError("the process running eqsat died: a native crash (abort, segmentation fault); "
                             "its message is on the test's stderr") from None
    except FutureTimeout:
        for p in list(getattr(pool, "_processes", {}).values()):
            p.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        _POOL.clear()
        raise AssertionError(f"eqsat gave no answer in {timeout or TIMEOUT:g} s") from None


def shutdown() -> None:
    """Stop the worker process (at the end of a run, before the interpreter exits)."""
    while _POOL:
        _POOL.pop().shutdown(wait=True, cancel_futures=True)


def cli(args: list) -> tuple[int, str, str]:
    """`in_process` in the worker process (`isolated`)."""
    return isolated(in_process, [str(a) for a in args])


def optimize_bytes(model: bytes, options: dict) -> bytes:
    """eqsat.core.pipeline.optimize on a serialized model; the optimized model serialized."""
    import onnx

    from eqsat.core.pipeline import Options, optimize

    return optimize(onnx.load_from_string(model), Options(**options)).model.SerializeToString()


def subprocess(args: list, env: dict | None = None, cwd: str | os.PathLike | None = None,
               timeout: float = 300) -> tuple[int, str, str]:
    full = dict(os.environ)
    full.update(env or {})
    p = sp.run([sys.executable, "-m", "eqsat", *map(str, args)], env=full, cwd=cwd, capture_output=True,
               text=True, timeout=timeout, preexec_fn=limit_memory)
    return p.returncode, p.stdout, p.stderr


def assert_clean_failure(rc: int, err: str, codes=(1, 2)) -> str:
    """The one error line (see the module docstring)."""
    assert "Traceback" not in err, f"a traceback:\n{err}"
    assert rc in codes, f"exit code {rc}, expected one of {codes}; stderr:\n{err}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(ERROR)]
    assert len(errors) == 1, f"{len(errors)} error lines, expected one; stderr:\n{err}"
    assert lines[-1].startswith(ERROR), f"the error line is not the last line of stderr:\n{err}"
    assert len(errors[0]) > len(ERROR) + 3, f"an empty error message: {errors[0]!r}"
    return errors[0]


def assert_no_traceback(rc: int, err: str) -> None:
    assert "Traceback" not in err, f"a traceback:\n{err}"
    assert rc in (0, 1, 2), f"exit code {rc}; stderr:\n{err}"


def snapshot(folder: str | os.PathLike) -> dict[str, str]:
    """Every entry under `folder` (links not followed): relative path -> a digest of what it is."""
    out = {}
    root = Path(folder)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            else:
                try:
                    out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
                except OSError as e:
                    out[rel] = f"unreadable:{e.errno}"
    return out


def assert_unchanged(before: dict[str, str], folder: str | os.PathLike, may_add: tuple[str, ...] = ()) -> None:
    """`folder` holds what `before` recorded, plus at most the files named in `may_add`."""
    after = snapshot(folder)
    added = sorted(set(after) - set(before) - set(may_add))
    removed = sorted(set(before) - set(after))
    changed = sorted(k for k in set(before) & set(after) if before[k] != after[k])
    assert not (added or removed or changed), f"left behind {added}, removed {removed}, changed {changed}"
