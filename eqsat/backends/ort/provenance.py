"""Where a measurement was taken: the machine, onnxruntime's and eqsat's versions and the
commit eqsat ran from, for compare-costs' JSON and program sets, so that figures from two
machines or two commits can be told apart."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

# CPU flags that say how wide onnxruntime's kernels' vectors are, widest first
VECTOR_FLAGS = (("avx512f", 512), ("avx2", 256), ("avx", 256), ("sse2", 128), ("asimd", 128), ("neon", 128))


def machine() -> dict:
    """CPU model, logical cores, architecture, vector width in bits (from the CPU's flags;
    0 when unknown) and onnxruntime's NCHWc channel block here (0: not used)."""
    from eqsat.backends.ort.target import nchwc_block

    model, flags = _cpuinfo()
    width = next((bits for flag, bits in VECTOR_FLAGS if flag in flags), 0)
    return {"cpu": model or platform.processor() or "unknown", "cores": os.cpu_count(), "arch": platform.machine(),
            "system": platform.system(), "vector_bits": width,
            "vector_flags": [f for f, _ in VECTOR_FLAGS if f in flags], "nchwc_block": nchwc_block()}


def _cpuinfo() -> tuple[str, set[str]]:
    """(the first `model name`, the first `flags` or `Features` line's words) of /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "", set()
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, flags


def software() -> dict:
    """Versions of eqsat, onnxruntime, onnx and Python, and eqsat's git commit when it runs
    from a checkout (`commit`, with `dirty` true when files differ from it; both None elsewhere)."""
    import onnx

    import eqsat
    from eqsat.backends.ort.sessions import ort

    commit, dirty = git_commit(Path(eqsat.__file__).resolve().parent.parent)
    return {"eqsat": eqsat.__version__, "onnxruntime": ort().__version__, "onnx": onnx.__version__,
            "python": platform.python_version(), "commit": commit, "dirty": dirty}


def git_commit(folder: Path) -> tuple[str | None, bool | None]:
    """(HEAD's commit, whether tracked files differ from it) of the git checkout holding
    `folder`, or (None, None) when it is not in one or git is missing."""
    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)
