"""Helpers of the fuzzer's regression tests (here and in tests/fuzz/pending): run the `eqsat`
command line in-process and check the one-line error contract."""

from __future__ import annotations

from eqsat.cli.main import main


def run(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clean_error(rc: int, err: str, code: int | tuple[int, ...] = 2) -> str:
    assert "Traceback" not in err, err
    assert rc in (code if isinstance(code, tuple) else (code,)), err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("eqsat: error:"), err
    assert sum(ln.startswith("eqsat: error:") for ln in lines) == 1, err
    return lines[-1]
