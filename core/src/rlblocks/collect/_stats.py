"""What a ``collect`` call returns (``CollectStats``) and the running tally collectors keep
while it runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from attrs import define, field


@define
class CollectStats:
    """What one ``collect`` call did.

    Read it by attribute (``stats.n_episode``) or by key (``stats["n_episode"]``), including
    Tianshou's keys (``stats["rew"]``, ``stats["n/ep"]``; see :data:`TIANSHOU_KEYS`). It is not
    a dict: ``keys()`` lists the keys and ``dict(stats)`` copies them into one.
    """

    n_step: int = 0
    """Steps taken (summed over envs): env steps, or what a multi-agent collector counts
    (its ``count_steps_by``: env steps or agent steps)."""
    n_episode: int = 0
    """Episodes finished."""
    returns: np.ndarray = field(factory=lambda: np.zeros(0))
    """Undiscounted return of each finished episode, in finishing order."""
    lengths: np.ndarray = field(factory=lambda: np.zeros(0, dtype=np.int64))
    """Length of each finished episode."""
    seconds: float = 0.0
    """Wall time of the call."""
    outcomes: dict[str, int] = field(factory=dict)
    """Finished episodes per ``info["outcome"]`` of their last step (``"win"``, ``"draw"``,
    ``"loss"``: games, see :data:`OUTCOME_RATES`); empty for envs that report none."""
    env_steps: int | None = None
    """Env steps (``step`` calls of the envs) of a multi-agent collect, counted apart from
    ``n_step`` whatever it counts; None for single-agent collectors, whose ``n_step`` is it."""
    agent_steps: int | None = None
    """Agent transitions of a multi-agent collect (one per agent that acted); None for
    single-agent collectors."""

    @property
    def steps_per_s(self) -> float:
        """Env steps per second of wall time."""
        return self.n_step / self.seconds if self.seconds > 0 else 0.0

    @property
    def mean_return(self) -> float:
        """Mean episode return (nan when no episode finished)."""
        return float(self.returns.mean()) if len(self.returns) else float("nan")

    @property
    def std_return(self) -> float:
        return float(self.returns.std()) if len(self.returns) else float("nan")

    @property
    def mean_length(self) -> float:
        """Mean episode length (nan when no episode finished)."""
        return float(self.lengths.mean()) if len(self.lengths) else float("nan")

    @property
    def outcome_rates(self) -> dict[str, float]:
        """``{"win_rate": .., "draw_rate": .., "loss_rate": ..}`` over the episodes that reported
        an outcome; empty when none did (envs that are no games)."""
        total = sum(self.outcomes.values())
        if not total:
            return {}
        return {
            f"{name}_rate": self.outcomes.get(name, 0) / total for name in OUTCOME_NAMES
        }

    def keys(self) -> tuple[str, ...]:
        """The keys ``stats[key]`` accepts: the fields, the derived values, Tianshou's keys."""
        return _STATS_KEYS

    def __getitem__(self, key: str) -> Any:
        name = TIANSHOU_KEYS.get(key, key) if isinstance(key, str) else None
        if name in _STATS_NAMES:
            return getattr(self, name)
        if key == "v/ep":
            return self.n_episode / self.seconds if self.seconds > 0 else 0.0
        if key == "len_std":
            return float(self.lengths.std()) if len(self.lengths) else float("nan")
        raise KeyError(f"CollectStats has no key {key!r}; the keys are {', '.join(_STATS_KEYS)}")

    def __contains__(self, key: object) -> bool:
        return key in _STATS_KEYS

    def __iter__(self) -> Iterator[str]:
        return iter(_STATS_KEYS)

    def as_scalars(self) -> dict[str, float]:
        """Scalars for logging."""
        out = {
            "n_step": int(self.n_step),
            "n_episode": int(self.n_episode),
            "steps_per_s": self.steps_per_s,
        }
        if len(self.returns):
            out.update(
                return_mean=self.mean_return,
                return_std=self.std_return,
                return_min=float(np.min(self.returns)),
                return_max=float(np.max(self.returns)),
                length_mean=float(self.lengths.mean()),
            )
        out.update(self.outcome_rates)
        return out


#: the outcomes of games whose rates stats report (``info["outcome"]`` at an episode's end)
OUTCOME_NAMES = ("win", "draw", "loss")
#: the scalars and ``tests.csv`` columns of those rates
OUTCOME_RATES = tuple(f"{name}_rate" for name in OUTCOME_NAMES)


def count_outcome(outcomes: dict[str, int], info: Any) -> None:
    """Count ``info["outcome"]`` (a finished episode's last step info) into ``outcomes``."""
    if isinstance(info, Mapping):
        outcome = info.get("outcome")
        if isinstance(outcome, str):
            outcomes[outcome] = outcomes.get(outcome, 0) + 1


#: ``CollectStats`` read by name: its fields and derived values
_STATS_NAMES = (
    "n_step", "n_episode", "returns", "lengths", "seconds", "steps_per_s", "mean_return",
    "std_return", "mean_length", "outcomes", "outcome_rates",
)  # fmt: skip


#: Tianshou's collect-result keys that ``CollectStats[key]`` maps onto its own names; besides
#: these, ``"v/ep"`` is episodes per second and ``"len_std"`` the lengths' standard deviation.
#: Tianshou's ``"idxs"`` (buffer indices of the episodes) has no counterpart.
TIANSHOU_KEYS: dict[str, str] = {
    "n/ep": "n_episode",
    "n/st": "n_step",
    "rews": "returns",
    "lens": "lengths",
    "rew": "mean_return",
    "rew_std": "std_return",
    "len": "mean_length",
    "v/st": "steps_per_s",
}


_STATS_KEYS = (*_STATS_NAMES, *TIANSHOU_KEYS, "v/ep", "len_std")


class EpisodeTally:
    """What one ``collect`` call has done so far: steps, finished episodes and (in
    complete-episodes mode) how many episodes were started."""

    __slots__ = (
        "closing", "episodes", "lengths", "n_episode", "outcomes", "returns", "started", "steps",
    )  # fmt: skip

    def __init__(self, n_episode: int | None, started: int) -> None:
        self.n_episode = n_episode
        self.started = started
        #: complete-episodes mode has its steps: envs whose episode ends now retire
        self.closing = False
        self.steps = 0
        self.episodes = 0
        self.returns: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        #: finished episodes per ``info["outcome"]`` (games)
        self.outcomes: dict[str, int] = {}

    def stats(self, seconds: float) -> CollectStats:
        return CollectStats(
            n_step=self.steps,
            n_episode=self.episodes,
            returns=np.concatenate(self.returns) if self.returns else np.zeros(0),
            lengths=(np.concatenate(self.lengths) if self.lengths else np.zeros(0, dtype=np.int64)),
            seconds=seconds,
            outcomes=dict(self.outcomes),
        )
