"""Statistics over seeds, shared by ``--seeds`` summaries and ``rlblocks plot --seeds``.

The estimators and intervals are those the field's reliable-evaluation practice recommends
(Agarwal et al., "Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021, and their
rliable library): the interquartile mean (IQM: the mean of the middle half of the runs) as the
point estimate, and percentile intervals from a *stratified* bootstrap, which resamples the runs
of each task (env) separately, so that a task with more runs does not weigh more. rliable itself
is not a dependency: rliable 1.2 needs arch, and arch 7.2 fails to import with pandas 3.1 (the
pandas pip installs with them today); the few lines we would use are here, written to the
definitions in its paper and documentation.

NaN stands for a run without a value (a learning curve before a run's first test or after it
stopped); every statistic here leaves such runs out of the point where they have none.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: Below this many runs per task a summary warns: the IQM of 3 runs is their mean, and a
#: bootstrap interval of so few runs is little more than their range.
FEW_SEEDS = 5

Statistic = Callable[..., Any]


def nan_iqm(x: np.ndarray, axis: int = 0) -> np.ndarray | float:
    """Interquartile mean along ``axis``, NaN left out: of the ``k`` values present, the mean of
    those ranked ``floor(k/4)`` to ``k - floor(k/4) - 1`` (scipy's ``trim_mean(x, 0.25)`` on the
    values present, as rliable computes it). NaN where no value is present."""
    a = np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1)
    s = np.sort(a, axis=-1)  # NaN sorts last
    k = np.sum(~np.isnan(a), axis=-1, keepdims=True)
    cut = k // 4
    rank = np.arange(a.shape[-1])
    keep = (rank >= cut) & (rank < k - cut)
    with np.errstate(invalid="ignore", divide="ignore"):
        total = np.where(keep, s, 0.0).sum(axis=-1)
        out = total / keep.sum(axis=-1)
    return float(out) if np.ndim(out) == 0 else out


def iqm(x: np.ndarray, axis: int = 0) -> Any:
    """Interquartile mean: the mean of the middle 50% of the values (NaN left out)."""
    return nan_iqm(x, axis=axis)


def nan_mean(x: np.ndarray, axis: int = 0) -> Any:
    """Mean along ``axis`` of the values present (NaN where none is)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x, axis=axis)


def nan_median(x: np.ndarray, axis: int = 0) -> Any:
    """Median along ``axis`` of the values present (NaN where none is)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(x, axis=axis)


STATISTICS: dict[str, Statistic] = {"mean": nan_mean, "median": nan_median, "iqm": nan_iqm}


def stratified_bootstrap(
    strata: Sequence[np.ndarray],
    statistic: Statistic,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of ``statistic`` over the runs of every stratum together, each
    stratum's runs resampled with replacement on their own (rliable's stratified bootstrap).

    ``strata``: one array per task, runs on axis 0 (``[runs]`` for final scores, ``[runs, T]``
    for curves on a shared grid). ``statistic(x, axis=1)`` reduces the pooled resampled runs
    ``[resamples, runs, ...]``. Returns ``(low, high)``, shaped like one value of the statistic;
    both equal the statistic where every stratum has a single run or no spread."""
    arrays = [np.asarray(s, dtype=np.float64) for s in strata]
    if not arrays or any(a.shape[0] == 0 for a in arrays):
        raise ValueError("every stratum needs at least one run")
    rng = np.random.default_rng(seed)
    picks = [a[rng.integers(0, a.shape[0], size=(resamples, a.shape[0]))] for a in arrays]
    values = np.asarray(statistic(np.concatenate(picks, axis=1), axis=1), dtype=np.float64)
    tail = 100.0 * (1.0 - confidence) / 2.0
    with warnings.catch_warnings():  # a point no resampled run has a value at stays NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        low = np.nanpercentile(values, tail, axis=0)
        high = np.nanpercentile(values, 100.0 - tail, axis=0)
    return low, high


def few_seeds_note(n: int) -> str | None:
    """A warning's text when ``n`` seeds are too few for the interval estimates; None from
    :data:`FEW_SEEDS` up."""
    if n >= FEW_SEEDS:
        return None
    detail = "the IQM is then their plain mean, " if n < 4 else ""
    return (
        f"only {n} seed{'s' * (n != 1)}: {detail}and a bootstrap interval of fewer than "
        f"{FEW_SEEDS} runs is little more than their range; run at least {FEW_SEEDS} (10 for a "
        "published figure) before reading the intervals"
    )
