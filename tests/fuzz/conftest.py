"""The fuzz folder's pytest hooks: the `fuzz` marker, and the count of examples each
property ran printed at the end of the run (and written to $EQSAT_FUZZ_STATS when set)."""

from __future__ import annotations

from . import clirun, stats


def pytest_configure(config):
    config.addinivalue_line("markers", "fuzz: hypothesis fuzzing of eqsat (tests/fuzz); bounded in the suite, "
                                       "long under `make fuzz`")


def pytest_terminal_summary(terminalreporter):
    data = stats.as_dict()
    if data:
        terminalreporter.section("eqsat fuzz")
        for line in stats.lines(data):
            terminalreporter.write_line(line)


def pytest_sessionfinish(session):
    stats.dump()
    clirun.shutdown()
