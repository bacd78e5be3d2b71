"""The order in which side-by-side latency measurements run their sessions.

Standalone (no eqsat imports): benchmarks/peers.py loads this file from the checkout by path,
because its measuring children may run an older eqsat (`--eqsat-commit`) that lacks it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator


def round_orders(n: int, rounds: int, seed: int = 0) -> Iterator[list[int]]:
    """`rounds` permutations of range(n), each shuffled, none starting with the index the one
    before ended with. A fixed order biases by position: reversing it every other round runs
    the first and last sessions twice in a row at each turn and those in the middle never (an
    identical control then measures away from 1); a plain cycle (A B C A B C) runs each
    session always right after the same one."""
    rng = random.Random(seed)
    last = None
    for _ in range(rounds):
        perm = list(range(n))
        rng.shuffle(perm)
        if n > 1 and perm[0] == last:
            j = rng.randrange(1, n)
            perm[0], perm[j] = perm[j], perm[0]
        last = perm[-1]
        yield perm
