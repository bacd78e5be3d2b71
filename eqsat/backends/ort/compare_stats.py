"""The figures compare-costs reports beside Kendall's tau: per-program intervals of the
median latency, the A-vs-A noise floor, top-k regret and the error of predicted time."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# a cost model's unit -> milliseconds per unit, for the models that predict time
TIME_UNITS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def median_interval(samples: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """The distribution-free interval of the median: the k-th smallest and k-th largest
    sample, k the largest rank with P(Binomial(n, 1/2) < k) <= (1 - level) / 2, which holds
    the true median with probability >= `level` whatever the distribution; None below six
    samples (where no k is small enough)."""
    from scipy.stats import binom

    n = len(samples)
    k = int(binom.ppf((1 - level) / 2, n, 0.5))  # P(X <= k) >= alpha/2 at this k: step back while too much
    while k > 0 and binom.cdf(k - 1, n, 0.5) > (1 - level) / 2:
        k -= 1
    if k < 1:
        return None
    x = sorted(samples)
    return float(x[k - 1]), float(x[n - k])


def ratio_interval(a: Sequence[float], b: Sequence[float], n: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """95 % percentile bootstrap interval of median(a) / median(b), each resampled on its
    own; None with fewer than two samples of either."""
    import numpy as np

    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(seed)
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    r = np.median(x[rng.integers(0, len(x), (n, len(x)))], axis=1) / np.median(
        y[rng.integers(0, len(y), (n, len(y)))], axis=1)
    lo, hi = np.percentile(r, [2.5, 97.5])
    return float(lo), float(hi)


def top_k_regret(predicted: Sequence[float], measured: Sequence[float], k: int) -> float | None:
    """How much slower the fastest of the model's `k` lowest-predicted programs is than the
    fastest measured one (TenSet's and TpuGraphs' top-k: best among top-k / best - 1): 0
    when the model's top k hold the fastest. Programs predicted alike at the k-th place are
    drawn at random: the regret is its expectation over those draws. None without programs."""
    if not predicted:
        return None
    k = min(k, len(predicted))
    order = sorted(range(len(predicted)), key=lambda i: predicted[i])
    edge = predicted[order[k - 1]]
    sure = [measured[i] for i in order if predicted[i] < edge]
    tied = sorted(measured[i] for i in order if predicted[i] == edge)
    draw = k - len(sure)  # drawn from `tied` without replacement
    best_sure = min(sure, default=math.inf)
    m = len(tied)
    expected = 0.0
    for j, t in enumerate(tied):  # P(the fastest drawn is tied[j]) = C(m - j - 1, draw - 1) / C(m, draw)
        p = math.comb(m - j - 1, draw - 1) / math.comb(m, draw)
        expected += p * min(best_sure, t)
    return expected / min(measured) - 1


def mean_abs_error(predicted: Sequence[float], measured_ms: Sequence[float], unit: str) -> float | None:
    """Mean |predicted - measured| in milliseconds over the programs, for a model whose unit
    is a time (TIME_UNITS); None for one that counts something else (ops)."""
    scale = TIME_UNITS.get(unit)
    if scale is None or not predicted:
        return None
    return statistics.fmean(abs(p * scale - m) for p, m in zip(predicted, measured_ms, strict=True))


NEAR_BEST = 0.10  # "near the best": measured within this fraction of the fastest program


def near_best(measured: Sequence[float], within: float = NEAR_BEST) -> list[int]:
    """The programs measured within `within` of the fastest (the ones a good cost model must
    still order: TpuGraphs' and issue 29's "tau among near-best programs")."""
    if not measured:
        return []
    best = min(measured)
    return [i for i, m in enumerate(measured) if m <= (1 + within) * best]
