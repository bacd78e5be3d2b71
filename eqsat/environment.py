"""The environment settings eqsat reads, each checked as a command-line flag is: a value the
setting does not accept is a UsageError (exit 2) naming the variable, what it holds and what
it accepts. Unset, empty or blank: the default. Surrounding blanks are ignored.

    EQSAT_NCHWC         0 or 1 (default 1): 0 turns onnxruntime's channel-blocked layout off
                        (eqsat.backends.ort.target.nchwc_block)
    EQSAT_NCHWC_BLOCK   0 or a power of two >= 2: the NCHWc block to use instead of the one
                        probed from onnxruntime; 0: no blocked layout (tests)
    EQSAT_U8S8_EXACT    0 or 1: whether onnxruntime's uint8 x int8 kernels sum exactly here (1:
                        int8 dot products, VNNI) or saturate (0), instead of the probe
                        (eqsat.backends.ort.target.u8s8_exact); 0 writes QDQ models that are
                        exact on every CPU
    EQSAT_CACHE         a folder (default ~/.cache/eqsat): where the measured cost model keeps
                        its times (eqsat.backends.ort.measure)
    EQSAT_REUSE_MEMORY  0 or 1 (default 1): 0 leaves glibc's allocator at its defaults
                        (eqsat.io.allocator)
    EQSAT_ILP_DISP      0 or 1 (default 0): 1 prints HiGHS's log (extract.ilp.solver_log)

`check_environment()` checks them all; the commands call it before any work, so that a bad
setting fails whether or not the run would have read it.
"""

from __future__ import annotations

import os
from pathlib import Path

from eqsat.errors import UsageError

SWITCHES = {"EQSAT_NCHWC": True, "EQSAT_REUSE_MEMORY": True}  # name -> default (EQSAT_ILP_DISP: extract.ilp)


def _value(name: str) -> str | None:
    v = os.environ.get(name, "").strip()
    return v or None


def _bad(name: str, accepted: str) -> UsageError:
    return UsageError(f"{name} is {os.environ[name]!r}; expected {accepted}")


def switch(name: str) -> bool:
    """A 0-or-1 setting of SWITCHES: its value, or its default when unset."""
    v = _value(name)
    if v is None:
        return SWITCHES[name]
    if v not in ("0", "1"):
        raise _bad(name, "0 or 1 (unset: the default, " + ("1" if SWITCHES[name] else "0") + ")")
    return v == "1"


def nchwc_block_override() -> int | None:
    """EQSAT_NCHWC_BLOCK: the block to use (0: none), or None to probe onnxruntime's."""
    v = _value("EQSAT_NCHWC_BLOCK")
    if v is None:
        return None
    try:
        block = int(v)
    except ValueError:
        block = -1
    if block != 0 and (block < 2 or block & (block - 1)):
        raise _bad("EQSAT_NCHWC_BLOCK", "0 (no blocked layout) or a power of two >= 2 (the channel block: "
                                        "onnxruntime's is 8 with AVX2, 16 with AVX-512); unset it to probe "
                                        "onnxruntime's")
    return block


def u8s8_exact_override() -> bool | None:
    """EQSAT_U8S8_EXACT: 0 or 1, or None to probe onnxruntime's uint8 x int8 kernels."""
    v = _value("EQSAT_U8S8_EXACT")
    if v is None:
        return None
    if v not in ("0", "1"):
        raise _bad("EQSAT_U8S8_EXACT", "0 (onnxruntime's uint8 x int8 kernels saturate: write weights as uint8) "
                                       "or 1 (they sum exactly); unset it to probe onnxruntime's")
    return v == "1"


def cache_folder() -> Path | None:
    """EQSAT_CACHE, else ~/.cache/eqsat; None where there is no home folder to default to.
    A folder that does not exist yet is made when the cache is first written."""
    v = _value("EQSAT_CACHE")
    if v is None:
        try:
            return Path.home() / ".cache" / "eqsat"
        except (RuntimeError, KeyError):  # no HOME and no passwd entry
            return None
    folder = Path(v).expanduser()
    if folder.exists() and not folder.is_dir():
        raise _bad("EQSAT_CACHE", "a folder for the measured cost model's cache (it names a file); "
                                  "unset it for ~/.cache/eqsat")
    return folder


def check_environment() -> None:
    """Raise UsageError for the first setting that holds a value it does not accept."""
    from eqsat.extract.ilp import solver_log

    for name in SWITCHES:
        switch(name)
    nchwc_block_override()
    u8s8_exact_override()
    cache_folder()
    try:
        solver_log()  # the extract package's own check (it imports nothing of eqsat)
    except ValueError as e:
        raise UsageError(str(e)) from None
