"""Hypothesis settings of the fuzz properties.

`ci(n)`: the suite's run, n examples (times $EQSAT_FUZZ_SCALE, default 1), derandomized
(the same examples every run), no deadline, no database. `campaign(n, database)`: a
long run's batch, random, with the example database that replays found failures first.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
          HealthCheck.large_base_example]


def ci(n: int) -> settings:
    scale = float(os.environ.get("EQSAT_FUZZ_SCALE", "1") or 1)
    return settings(max_examples=max(1, round(n * scale)), derandomize=True, deadline=None, database=None,
                    suppress_health_check=HEALTH, print_blob=True)


def campaign(n: int, database: str | None, replay: bool = True) -> settings:
    """`replay`: run the database's saved failures first (the first batch of a property)."""
    phases = [p for p in Phase if replay or p not in (Phase.reuse, Phase.explicit)]
    return settings(max_examples=n, derandomize=False, deadline=None, print_blob=True,
                    database=DirectoryBasedExampleDatabase(database) if database else None,
                    suppress_health_check=HEALTH, phases=phases)
