"""Two-player and n-player games as single-agent gymnasium envs: one learner seat, the other
seats played inside the env by opponents.

A PettingZoo AEC game (``pettingzoo.classic.tictactoe_v3``, ``connect_four_v3``, ...) seen from
one seat is an ordinary gymnasium env, so every algorithm with Discrete actions and every vector
backend (dummy, subproc, shmem, ray) runs it unchanged. Importing this module registers the
classic games under the ``games/`` namespace (``games/tictactoe_v3``, ``games/connect_four_v3``
...); rlblocks imports it for any ``games/...`` id, also in env worker processes::

    rlblocks train dqn --env games/tictactoe_v3 --set env.make_kwargs.opponent=random

* **Observation**: the seat's PettingZoo observation, ``Dict({"observation": Box,
  "action_mask": Box})`` (PettingZoo's own keys: 1 marks a legal action).
* **Reward**: what the learner's seat received between two of its turns (the opponents' moves
  included), so a game lost on the opponent's move ends with the loss.
* **Seat**: ``seat="alternate"`` (default: the first seat, then the next, ...), ``"random"``,
  or a seat's agent name (``"player_1"``).
* **Outcome**: the info of the step that ends a game carries ``"outcome"`` (``"win"``,
  ``"draw"`` or ``"loss"``: the learner's total reward strictly above every other seat's, tied
  with the best, or below it), ``"seat"`` and ``"opponent"``; rlblocks' collectors count the
  outcomes, and tests report win/draw/loss rates (``tests.csv``, the logs, ``rlblocks eval``).
* **Opponents** (``opponent=``): ``"random"`` (uniform over legal moves), a run directory (its
  saved policy, acting greedily), ``"self"`` (self-play: a pool of the learner's own past
  copies, filled by :class:`SelfPlay` during training), or in Python any :class:`Opponent`.

Opponents act on CPU inside the env: in a worker process with subproc, shmem or ray.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo.utils.env_logger import EnvLogger

from rlblocks.contracts import ConfigError, EnvWorkerError
from rlblocks_family_pettingzoo.multiagent import KNOWN_PACKAGES
from rlblocks_family_pettingzoo.snapshot import NotSnapshottable, restore_object, snapshot_object

__all__ = [
    "GAMES",
    "GAME_NAMESPACE",
    "OUTCOMES",
    "SAMPLE_RULES",
    "GameEnv",
    "Opponent",
    "PolicySnapshot",
    "RandomOpponent",
    "SavedRunOpponent",
    "SelfPlay",
    "SelfPlayOpponent",
    "game_outcome",
    "make_opponent",
    "play_games",
]

#: the gymnasium id namespace of the games registered here
GAME_NAMESPACE = "games"
#: ``games/<name>`` -> the PettingZoo AEC constructor it plays (games with action masks)
GAMES: dict[str, str] = {
    name: f"pettingzoo.classic.{name}:env"
    for name in (
        "tictactoe_v3",
        "connect_four_v3",
        "chess_v6",
        "go_v5",
        "leduc_holdem_v4",
        "texas_holdem_v4",
        "texas_holdem_no_limit_v6",
    )
}
#: what ``info["outcome"]`` says at the end of a game, from the learner's seat
OUTCOMES = ("win", "draw", "loss")
#: how a self-play opponent picks its copy of the learner for a game
SAMPLE_RULES = ("latest", "uniform", "prioritized")
#: the keys of ``make_kwargs["self_play"]``
SELF_PLAY_KEYS = ("every", "pool_size", "sample", "priority_power")


def game_outcome(totals: Mapping[str, float], seat: str) -> str:
    """``"win"`` when ``seat``'s total reward is strictly above every other seat's, ``"draw"``
    when it ties the best, ``"loss"`` otherwise (n-player games included)."""
    mine = float(totals[seat])
    best_other = max((float(v) for a, v in totals.items() if a != seat), default=-math.inf)
    if mine > best_other:
        return "win"
    return "draw" if mine == best_other else "loss"


def _legal(observation: Mapping[str, Any]) -> np.ndarray:
    """The legal actions of an observation's ``action_mask``."""
    return np.flatnonzero(np.asarray(observation["action_mask"]))


def _random_legal(observation: Mapping[str, Any], rng: np.random.Generator) -> int:
    legal = _legal(observation)
    if not len(legal):
        raise RuntimeError("the game offers no legal action to the seat whose turn it is")
    return int(rng.choice(legal))


# -- opponents ---------------------------------------------------------------------------------
class Opponent:
    """A player of the seats other than the learner's.

    ``act`` returns a legal action for one observation (a dict with ``"action_mask"``);
    ``start_game`` is called once per game before any move (and returns a label for
    ``info["opponent"]``), ``end_game`` once with the learner's outcome.

    ``snapshot_state`` / ``restore_state`` let a resumed run continue the game under way
    exactly (see :meth:`GameEnv.snapshot_state`): the opponent's state as plain values, or None
    when it cannot say (the default, for opponents of your own: a resumed run then restarts
    the game). Draw randomness from the ``rng`` the env passes, which the env snapshots."""

    label = "opponent"

    def snapshot_state(self) -> dict[str, Any] | None:
        """What continuing the current game needs, as plain values; None: cannot be saved."""
        return None

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`snapshot_state` of a twin made the same way."""

    def start_game(self, rng: np.random.Generator) -> str:
        return self.label

    def act(self, observation: Mapping[str, Any], rng: np.random.Generator) -> int:
        raise NotImplementedError

    def end_game(self, outcome: str) -> None:
        """The learner's outcome of the game just played (self-play keeps win rates)."""


class RandomOpponent(Opponent):
    """Uniform over the legal moves (never an illegal one)."""

    label = "random"

    def act(self, observation: Mapping[str, Any], rng: np.random.Generator) -> int:
        return _random_legal(observation, rng)

    def snapshot_state(self) -> dict[str, Any]:
        return {}  # it draws from the env's generator, which the env snapshots

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore."""


class _CallableOpponent(Opponent):
    """A plain function ``fn(observation) -> action`` as an opponent (scripted players)."""

    def __init__(self, fn: Callable[[Mapping[str, Any]], Any]) -> None:
        self.fn = fn
        self.label = getattr(fn, "__name__", type(fn).__name__)

    def act(self, observation: Mapping[str, Any], rng: np.random.Generator) -> int:
        return int(self.fn(observation))


class _GreedyPlayer:
    """Greedy moves of an rlblocks agent; an illegal choice (an algorithm that reads no action
    mask) is replaced by a random legal move and counted in ``illegal_moves``."""

    def __init__(self) -> None:
        self.illegal_moves = 0

    def greedy(self, agent: Any, observation: Mapping[str, Any], rng: np.random.Generator) -> int:
        action = int(np.asarray(agent.act(dict(observation))).reshape(-1)[0])
        if not observation["action_mask"][action]:
            self.illegal_moves += 1
            return _random_legal(observation, rng)
        return action


@contextlib.contextmanager
def _torch_rng_kept() -> Iterator[None]:
    """Build an opponent's policy without drawing from torch's global generator: in the
    trainer's process (the dummy backend) that stream is the run's, and an opponent built at
    another moment (after a resume) must not shift it."""
    import torch

    with torch.random.fork_rng(devices=[]):
        yield


class SavedRunOpponent(Opponent, _GreedyPlayer):
    """A saved run's policy (``rlblocks.load(path)``, on CPU), acting greedily. Loaded on its
    first move, so making the env (also in a worker process) stays cheap."""

    def __init__(self, path: str | os.PathLike[str], which: str = "best") -> None:
        _GreedyPlayer.__init__(self)
        self.path = Path(path)
        if not self.path.exists():
            raise ConfigError(
                f"opponent {str(path)!r} is not 'random', 'self' or an existing run directory "
                "(or checkpoint file); give one of them"
            )
        self.which = which
        self.label = f"run:{self.path.name}"
        self._agent: Any = None

    def act(self, observation: Mapping[str, Any], rng: np.random.Generator) -> int:
        if self._agent is None:
            from rlblocks.run import load

            with _torch_rng_kept():
                self._agent = load(self.path, which=self.which, device="cpu")
        return self.greedy(self._agent, observation, rng)

    def snapshot_state(self) -> dict[str, Any]:
        """Only its count of illegal moves: the saved policy is fixed and acts greedily."""
        return {"illegal_moves": self.illegal_moves}

    def restore_state(self, state: Mapping[str, Any]) -> None:
        self.illegal_moves = int(state.get("illegal_moves", 0))

    def __getstate__(self) -> dict[str, Any]:  # a worker loads its own copy
        return {**self.__dict__, "_agent": None}


class PolicySnapshot:
    """A copy of the learner's policy for self-play: the algorithm, its config as plain data,
    the spaces and the weights on CPU. Small and picklable, so it travels to env workers, where
    :meth:`agent` rebuilds the policy (as ``rlblocks.load`` does) to act greedily."""

    def __init__(
        self,
        version: int,
        algo: str,
        algo_config: Mapping[str, Any],
        observation_space: gym.Space,
        action_space: gym.Space,
        state: Mapping[str, Any],
    ) -> None:
        self.version = int(version)
        self.algo = algo
        self.algo_config = dict(algo_config)
        self.observation_space = observation_space
        self.action_space = action_space
        self.state = dict(state)

    @classmethod
    def of(
        cls, policy: Any, algo: str, algo_config: Mapping[str, Any], version: int
    ) -> PolicySnapshot:
        """A snapshot of ``policy``'s current weights, copied to CPU."""
        state = _to_cpu(policy.state_dict())
        return cls(version, algo, algo_config, policy.observation_space, policy.action_space, state)

    def agent(self) -> Any:
        """The snapshot as an :class:`rlblocks.run.Agent` on CPU (built without drawing from
        torch's global generator)."""
        from rlblocks.algo import optimizers_deferred
        from rlblocks.run import Agent, make_policy

        with optimizers_deferred(), _torch_rng_kept():
            policy = make_policy(
                self.algo, self.observation_space, self.action_space, device="cpu",
                config=self.algo_config,
            )  # fmt: skip
        policy.load_state_dict(self.state)
        return Agent(policy, None)


def _tensors_to_arrays(tree: Any) -> Any:
    """A state dict as plain values: its tensors as numpy arrays (an env snapshot's form)."""
    import torch

    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().numpy().copy()
    if isinstance(tree, Mapping):
        return {k: _tensors_to_arrays(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_tensors_to_arrays(v) for v in tree)
    return copy.deepcopy(tree)


def _arrays_to_tensors(tree: Any) -> Any:
    """Undo :func:`_tensors_to_arrays`."""
    import torch

    if isinstance(tree, np.ndarray):
        return torch.from_numpy(np.array(tree, copy=True))
    if isinstance(tree, Mapping):
        return {k: _arrays_to_tensors(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_arrays_to_tensors(v) for v in tree)
    return tree


def _to_cpu(tree: Any) -> Any:
    """A deep copy of a state dict with its tensors on CPU."""
    import torch

    if isinstance(tree, torch.Tensor):
        return tree.detach().to("cpu", copy=True)
    if isinstance(tree, Mapping):
        return {k: _to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_to_cpu(v) for v in tree)
    return copy.deepcopy(tree)


class SelfPlayOpponent(Opponent, _GreedyPlayer):
    """Self-play: each game is played against one copy of the learner from a pool of its past
    policies (set through :attr:`GameEnv.self_play_pool` by :class:`SelfPlay`), picked by
    ``sample``:

    * ``"latest"``: the newest copy;
    * ``"uniform"``: any copy of the pool, equally likely (fictitious self-play);
    * ``"prioritized"``: copies the learner beats less often are picked more, with weight
      ``(1 - p) ** priority_power`` where ``p`` is the learner's win rate against the copy in
      this env (a draw counts half; ``(wins + 1) / (games + 2)``): the prioritized fictitious
      self-play of AlphaStar's league (Vinyals et al. 2019), which uses ``f(p) = (1 - p)^2``.

    While the pool is empty (before the first copy arrives, and always in test envs, whose pool
    the trainer does not fill) the ``fallback`` opponent plays (random by default)."""

    label = "self"

    def __init__(
        self,
        sample: str = "latest",
        priority_power: float = 2.0,
        fallback: Opponent | None = None,
    ) -> None:
        _GreedyPlayer.__init__(self)
        if sample not in SAMPLE_RULES:
            raise ConfigError(f"self_play.sample={sample!r}; use one of {', '.join(SAMPLE_RULES)}")
        if not (isinstance(priority_power, int | float) and priority_power >= 0):
            raise ConfigError(
                f"self_play.priority_power={priority_power!r}; give a number >= 0 (2 is "
                "AlphaStar's)"
            )
        self.sample = sample
        self.priority_power = float(priority_power)
        self.fallback = fallback if fallback is not None else RandomOpponent()
        self.pool: list[PolicySnapshot] = []
        #: version -> [learner's score (win 1, draw 0.5), games] against that copy, this env
        self.results: dict[int, list[float]] = {}
        self._agents: dict[int, Any] = {}
        self._current: int | None = None
        #: the pool entry of the game under way (kept when it leaves the pool mid-game)
        self._playing: PolicySnapshot | None = None
        #: the learner's (observation, action) spaces, set by the env that plays this opponent
        self._spaces: tuple[gym.Space, gym.Space] | None = None

    def set_pool(self, pool: Sequence[PolicySnapshot]) -> None:
        """Replace the pool (its newest copy last); results of copies still in it are kept."""
        self.pool = list(pool)
        self._forget_dropped()

    def update_pool(self, add: Sequence[PolicySnapshot], drop: Sequence[int]) -> None:
        """Drop the copies of versions ``drop`` and append ``add`` (newest last): the pool
        :meth:`set_pool` would have been given, from only what changed."""
        gone = {int(v) for v in drop}
        self.pool = [s for s in self.pool if s.version not in gone] + list(add)
        self._forget_dropped()

    @property
    def versions(self) -> list[int]:
        """The versions of the pool's copies, oldest first."""
        return [s.version for s in self.pool]

    def _forget_dropped(self) -> None:
        versions = set(self.versions)
        # the copy of a game under way plays it to the end, even when it left the pool
        self._agents = {
            v: a for v, a in self._agents.items() if v in versions or v == self._current
        }
        self.results = {v: r for v, r in self.results.items() if v in versions}

    def weights(self) -> np.ndarray:
        """The probability of each pool entry under the sampling rule."""
        n = len(self.pool)
        if self.sample == "latest":
            w = np.zeros(n)
            w[-1] = 1.0
        elif self.sample == "uniform":
            w = np.ones(n)
        else:
            p = np.array([
                (self.results.get(s.version, [0.0, 0.0])[0] + 1.0)
                / (self.results.get(s.version, [0.0, 0.0])[1] + 2.0)
                for s in self.pool
            ])  # fmt: skip
            w = (1.0 - p) ** self.priority_power + 1e-12
        return w / w.sum()

    def start_game(self, rng: np.random.Generator) -> str:
        if not self.pool:
            self._current = None
            return self.fallback.start_game(rng)
        snapshot = self.pool[int(rng.choice(len(self.pool), p=self.weights()))]
        self._current = snapshot.version
        self._playing = snapshot
        if snapshot.version not in self._agents:
            self._agents[snapshot.version] = snapshot.agent()
        return f"self:{snapshot.version}"

    def act(self, observation: Mapping[str, Any], rng: np.random.Generator) -> int:
        if self._current is None:
            return self.fallback.act(observation, rng)
        return self.greedy(self._agent(self._current), observation, rng)

    def _agent(self, version: int) -> Any:
        """The built copy ``version``: built from the pool (or the copy a restored snapshot
        carried) when a resumed env meets it for the first time."""
        agent = self._agents.get(version)
        if agent is not None:
            return agent
        snap = next((s for s in self.pool if s.version == version), None)
        if snap is None and self._playing is not None and self._playing.version == version:
            snap = self._playing
        if snap is None:
            raise RuntimeError(
                f"the self-play copy {version} of the game under way is not in the pool "
                f"{self.versions}: a restored self-play env needs its pool (SelfPlay sends it "
                "when the run resumes) before it plays"
            )
        agent = self._agents[version] = snap.agent()
        return agent

    def end_game(self, outcome: str) -> None:
        if self._current is None:
            self.fallback.end_game(outcome)
            return
        score = {"win": 1.0, "draw": 0.5}.get(outcome, 0.0)
        tally = self.results.setdefault(self._current, [0.0, 0.0])
        tally[0] += score
        tally[1] += 1.0

    def snapshot_state(self) -> dict[str, Any] | None:
        """The copy of the game under way, the results per copy (prioritized sampling reads
        them) and the fallback's state; the pool's weights are not in it (:class:`SelfPlay`
        restores them from the run's checkpoint), except those of a copy that left the pool
        while its game was still under way."""
        fallback = self.fallback.snapshot_state()
        if fallback is None:
            return None
        left_pool = None
        if self._current is not None and self._current not in self.versions:
            playing = self._playing
            if playing is None or playing.version != self._current:
                return None
            try:
                weights = _tensors_to_arrays(playing.state)
            except TypeError:  # a dtype numpy has not (bfloat16)
                return None
            left_pool = {
                "version": playing.version,
                "algo": playing.algo,
                "algo_config": copy.deepcopy(playing.algo_config),
                "weights": weights,
            }
        return {
            "current": self._current,
            "results": [[v, float(r[0]), float(r[1])] for v, r in self.results.items()],
            "illegal_moves": self.illegal_moves,
            "fallback": fallback,
            "left_pool": left_pool,
        }

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`snapshot_state`; the pool (sent by :class:`SelfPlay`) may
        arrive before or after, but before the next move."""
        current = state["current"]
        self._current = None if current is None else int(current)
        self.results = {int(v): [float(w), float(n)] for v, w, n in state["results"]}
        self.illegal_moves = int(state.get("illegal_moves", 0))
        self.fallback.restore_state(state["fallback"])
        self._agents = {}
        self._playing = next((s for s in self.pool if s.version == self._current), None)
        left = state.get("left_pool")
        if left is None:
            return
        like = self.pool[0] if self.pool else None
        spaces = (like.observation_space, like.action_space) if like is not None else self._spaces
        if spaces is None:
            raise ValueError("a self-play snapshot with a copy outside the pool needs spaces")
        self._playing = PolicySnapshot(
            int(left["version"]), str(left["algo"]), dict(left["algo_config"]),
            spaces[0], spaces[1], _arrays_to_tensors(left["weights"]),
        )  # fmt: skip

    def __getstate__(self) -> dict[str, Any]:  # built agents stay where they were built
        return {**self.__dict__, "_agents": {}}


def make_opponent(
    spec: Any, self_play: Mapping[str, Any] | None = None, fallback: Any = "random"
) -> Opponent:
    """An opponent from its config value: ``"random"``, ``"self"`` (with the ``self_play``
    options ``sample`` and ``priority_power``; ``fallback`` plays while its pool is empty), a
    run directory or checkpoint file, an :class:`Opponent`, or a function ``obs -> action``."""
    if isinstance(spec, Opponent):
        return spec
    if isinstance(spec, str | os.PathLike):
        name = os.fspath(spec)
        if name == "random":
            return RandomOpponent()
        if name == "self":
            opts = _self_play_options(self_play)
            return SelfPlayOpponent(
                sample=opts.get("sample", "latest"),
                priority_power=opts.get("priority_power", 2.0),
                fallback=make_opponent(fallback),
            )
        return SavedRunOpponent(name)
    if callable(spec):
        return _CallableOpponent(spec)
    raise ConfigError(
        f"opponent {spec!r}: give 'random', 'self', a run directory, or (in Python) an "
        "Opponent or a function observation -> action"
    )


def _self_play_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(SELF_PLAY_KEYS))
    if unknown:
        raise ConfigError(
            f"env.make_kwargs.self_play has unknown keys {unknown}; it takes "
            f"{', '.join(SELF_PLAY_KEYS)}"
        )
    return opts


# -- the env -----------------------------------------------------------------------------------
def _game_factory(game: str) -> Callable[[], Any]:
    """The AEC constructor ``module:fn`` (PettingZoo's classic games, or any imported module)."""
    module, sep, ctor = game.rpartition(":")
    if not sep:
        raise ConfigError(
            f"game {game!r}: name a PettingZoo AEC constructor, 'module:env' (e.g. "
            "'pettingzoo.classic.tictactoe_v3:env')"
        )
    # a run's config is data: it may name PettingZoo's games, or a module already imported
    if module not in sys.modules and module.split(".")[0] not in KNOWN_PACKAGES:
        raise ConfigError(
            f"game {game!r} comes from the module {module!r}, and importing it runs its code; "
            "import it yourself first (games from pettingzoo need no import)"
        )
    try:
        fn = getattr(importlib.import_module(module), ctor)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"game {game!r} cannot be made: {exc}; is it installed?") from exc
    return fn


class GameEnv(gym.Env):
    """A PettingZoo AEC game seen from one learner seat (see the module's description).

    ``game``: the AEC constructor, ``"module:env"``; ``game_kwargs``: its keyword arguments;
    ``opponent``: who plays the other seats (:func:`make_opponent`); ``seat``: ``"alternate"``,
    ``"random"`` or an agent name; ``self_play``: the options of ``opponent="self"``
    (``every``, ``pool_size``: read by :class:`SelfPlay`; ``sample``, ``priority_power``: by
    :class:`SelfPlayOpponent`); ``test_opponent``: who plays while a self-play pool is empty
    (test envs)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["human", "ansi", "rgb_array"]}

    def __init__(
        self,
        game: str = GAMES["tictactoe_v3"],
        opponent: Any = "random",
        seat: str = "alternate",
        self_play: Mapping[str, Any] | None = None,
        test_opponent: Any = "random",
        game_kwargs: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        kwargs = dict(game_kwargs or {})
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        self.game = game
        self.render_mode = render_mode
        self.aec = _game_factory(game)(**kwargs)
        self.aec.reset(seed=0)
        self.seats: list[str] = list(self.aec.possible_agents)
        if len(self.seats) < 2:
            raise ConfigError(f"game {game!r} has {len(self.seats)} seat(s); a game needs two+")
        if seat not in ("alternate", "random", *self.seats):
            raise ConfigError(
                f"seat={seat!r}; use 'alternate', 'random' or one of the seats {self.seats}"
            )
        self.seat_rule = seat
        # the learner's seats: one fixed seat, or every seat (whose spaces must then agree)
        learner_seats = [seat] if seat in self.seats else self.seats
        spaces = {repr(self.aec.observation_space(a)) for a in learner_seats}
        actions = {repr(self.aec.action_space(a)) for a in learner_seats}
        first = learner_seats[0]
        obs_space = self.aec.observation_space(first)
        if len(spaces) > 1 or len(actions) > 1:
            raise ConfigError(
                f"game {game!r}: its seats have different observation or action spaces, so one "
                f"policy cannot play every seat; give the learner one seat (seat='{first}')"
            )
        if not (isinstance(obs_space, gym.spaces.Dict) and "action_mask" in obs_space.spaces):
            raise ConfigError(
                f"game {game!r}: its observations carry no 'action_mask' (got {obs_space}); "
                "games here are PettingZoo games with action masks"
            )
        self.observation_space = obs_space
        self.action_space = self.aec.action_space(first)
        self.self_play_options = _self_play_options(self_play)
        self.opponent = make_opponent(opponent, self.self_play_options, test_opponent)
        if isinstance(self.opponent, SelfPlayOpponent) and self.opponent._spaces is None:
            self.opponent._spaces = (self.observation_space, self.action_space)
        self._games = 0
        self.seat = first
        self._totals: dict[str, float] = {}
        self._label = ""
        self._pending = 0.0
        #: the learner's illegal moves (each lost its game)
        self.illegal_moves = 0

    # -- self-play pool (set from the trainer through the vector env's set_attr) ------------
    @property
    def self_play_pool(self) -> list[PolicySnapshot]:
        """The self-play opponent's pool of learner copies (empty for other opponents)."""
        return list(getattr(self.opponent, "pool", []))

    @self_play_pool.setter
    def self_play_pool(self, pool: Sequence[PolicySnapshot]) -> None:
        if isinstance(self.opponent, SelfPlayOpponent):
            self.opponent.set_pool(pool)

    @property
    def self_play_versions(self) -> list[int]:
        """The versions of the copies in the self-play pool, oldest first (empty for other
        opponents): what :class:`SelfPlay` checks before it sends only what changed."""
        return list(getattr(self.opponent, "versions", []))

    @property
    def self_play_update(self) -> None:
        """Write-only (reads None): ``{"add": [PolicySnapshot, ...], "drop": [version, ...]}``
        changes the self-play pool by what a refresh changed (:meth:`SelfPlayOpponent.
        update_pool`), so a refresh sends one copy instead of the whole pool."""
        return None

    @self_play_update.setter
    def self_play_update(self, update: Mapping[str, Any]) -> None:
        if isinstance(self.opponent, SelfPlayOpponent):
            self.opponent.update_pool(update.get("add", ()), update.get("drop", ()))

    # -- gymnasium API ------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        for _ in range(100):  # a game that ends before the learner moves is replayed
            game_seed = int(self.np_random.integers(2**31 - 1))
            self.aec.reset(seed=game_seed)
            self.seat = self._pick_seat()
            self._games += 1
            self._totals = dict.fromkeys(self.aec.possible_agents, 0.0)
            self._label = self.opponent.start_game(self.np_random)
            self._pending = 0.0
            if self._play_others():
                return self._observe(), {"seat": self.seat, "opponent": self._label}
            self.opponent.end_game(self._outcome())
        raise RuntimeError(f"game {self.game!r} ended before the learner's seat moved 100 times")

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        action = int(np.asarray(action).reshape(-1)[0])
        info: dict[str, Any] = {}
        mask = np.asarray(self.aec.observe(self.seat)["action_mask"])
        illegal = not (0 <= action < len(mask)) or not mask[action]
        if illegal:  # PettingZoo ends the game: the mover loses
            info["illegal_move"] = True
            self.illegal_moves += 1
            if self.illegal_moves == 1:
                warnings.warn(
                    f"the learner made an illegal move in {self.game} (it loses the game; "
                    "info['illegal_move'] marks each): use an algorithm that reads the "
                    "observation's action_mask",
                    stacklevel=2,
                )
        self._pending = 0.0
        quiet = EnvLogger._output
        EnvLogger.suppress_output()  # said once above, not on every illegal move
        try:
            self._step_aec(action)
        finally:
            EnvLogger._output = quiet
        ongoing = self._play_others()
        reward = self._pending
        obs = self._observe()
        if ongoing:
            return obs, reward, False, False, info
        terminated = bool(self.aec.terminations.get(self.seat, True))
        truncated = not terminated
        outcome = self._outcome()
        self.opponent.end_game(outcome)
        info.update(outcome=outcome, seat=self.seat, opponent=self._label)
        return obs, reward, terminated, truncated, info

    def render(self) -> Any:
        return self.aec.render()

    def close(self) -> None:
        self.aec.close()

    # -- snapshots: the protocol of rlblocks.collect, so a resumed run continues its games ---
    def snapshot_state(self) -> dict[str, Any]:
        """The game under way as plain values: the PettingZoo game (its board and random
        generator, :mod:`rlblocks_family_pettingzoo.snapshot`), the learner's seat, the
        running totals and reward, the games played (the alternating seat follows them), the
        env's random generator (seats, game seeds and the opponents' draws come from it) and
        the opponent's state (:meth:`Opponent.snapshot_state`). The refusal ``{"why": ...}``
        when the opponent or the game holds state that is not plain values: a resumed run
        then warns and restarts this env's game."""
        opponent = self.opponent.snapshot_state()
        if opponent is None:
            return {
                "why": f"its opponent {type(self.opponent).__qualname__} ({self.opponent.label}) "
                "cannot be snapshotted (give an Opponent snapshot_state() and "
                "restore_state(state) methods that return and take plain values)"
            }
        try:
            game = snapshot_object(self.aec)
        except NotSnapshottable as exc:
            return {"why": f"the game {self.game!r} cannot be snapshotted: {exc}"}
        rng = self.np_random
        return {
            "game": game,
            "seat": self.seat,
            "games": self._games,
            "totals": [[a, float(v)] for a, v in self._totals.items()],
            "pending": float(self._pending),
            "label": self._label,
            "illegal_moves": self.illegal_moves,
            "rng": rng.bit_generator.state,
            "opponent": opponent,
        }

    def restore_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`snapshot_state` of a twin made the same way."""
        restore_object(self.aec, state["game"])
        self.seat = str(state["seat"])
        self._games = int(state["games"])
        self._totals = {str(a): float(v) for a, v in state["totals"]}
        self._pending = float(state["pending"])
        self._label = str(state["label"])
        self.illegal_moves = int(state["illegal_moves"])
        rng_state = dict(state["rng"])
        bit = getattr(np.random, str(rng_state.get("bit_generator")), None)
        if bit not in (np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937,
                       np.random.Philox, np.random.SFC64):  # fmt: skip
            raise ValueError(f"unknown random generator {rng_state.get('bit_generator')!r}")
        rng = np.random.Generator(bit())
        rng.bit_generator.state = rng_state
        self._np_random = rng
        self.opponent.restore_state(state["opponent"])

    # -- the game loop ------------------------------------------------------------------------
    def _pick_seat(self) -> str:
        if self.seat_rule == "alternate":
            return self.seats[(self._games) % len(self.seats)]
        if self.seat_rule == "random":
            return self.seats[int(self.np_random.integers(len(self.seats)))]
        return self.seat_rule

    def _step_aec(self, action: Any) -> None:
        self.aec.step(action)
        for agent, r in self.aec.rewards.items():
            self._totals[agent] = self._totals.get(agent, 0.0) + float(r)
        self._pending += float(self.aec.rewards.get(self.seat, 0.0))

    def _learner_done(self) -> bool:
        return (
            self.seat not in self.aec.agents
            or bool(self.aec.terminations.get(self.seat, False))
            or bool(self.aec.truncations.get(self.seat, False))
        )

    def _play_others(self) -> bool:
        """Play the other seats until the learner's turn; False when the game ended first."""
        while self.aec.agents and not self._learner_done():
            agent = self.aec.agent_selection
            if agent == self.seat:
                return True
            if self.aec.terminations.get(agent) or self.aec.truncations.get(agent):
                self._step_aec(None)  # a seat out of the game leaves it
                continue
            obs = self.aec.observe(agent)
            self._step_aec(self.opponent.act(obs, self.np_random))
        return False

    def _observe(self) -> dict[str, np.ndarray]:
        obs = self.aec.observe(self.seat)
        return {
            k: np.asarray(obs[k], dtype=self.observation_space[k].dtype)
            for k in self.observation_space.spaces
        }

    def _outcome(self) -> str:
        return game_outcome(self._totals, self.seat)

    # -- what a run on this env needs on the trainer's side -----------------------------------
    @classmethod
    def rlblocks_run_hooks(cls, config: Mapping[str, Any]) -> list[object]:
        """Hooks a run on this env needs (:class:`~rlblocks.contracts.RunHooksEnv`):
        :class:`SelfPlay` when ``opponent="self"``."""
        make_kwargs = dict(config.get("env", {}).get("make_kwargs") or {})
        if make_kwargs.get("opponent") != "self":
            return []
        opts = _self_play_options(make_kwargs.get("self_play"))
        return [SelfPlay(every=opts.get("every", 1000), pool_size=opts.get("pool_size", 10))]


# -- the trainer's side of self-play -----------------------------------------------------------
class SelfPlay:
    """The trainer's side of self-play: a hook object that copies the learner's policy into the
    training envs' opponent pools (``set_attr("self_play_pool", ...)``, which reaches envs in
    worker processes too) after the first collect and then every ``every`` gradient steps (checked
    after each collect), keeping the newest ``pool_size`` copies. A run on a ``games/`` id with
    ``opponent="self"`` gets one by itself (``env.make_kwargs.self_play.every``/``pool_size``);
    in Python pass ``hooks=[SelfPlay(...)]`` for envs of your own. The pool's versions and
    weights go into checkpoints, so a resumed run plays against the same copies: they reach
    the envs as the run resumes, before the envs' games continue.

    The first push sends the whole pool; each refresh after it sends only the new copy and
    the versions dropped (``set_attr("self_play_update", ...)``) to the envs whose pool is the
    one sent last (``get_attr("self_play_versions")``), and the whole pool to any other (an env
    whose worker was restarted). Envs without ``self_play_versions`` get the whole pool."""

    def __init__(self, every: int = 1000, pool_size: int = 10) -> None:
        for name, value in (("every", every), ("pool_size", pool_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"self_play.{name}={value!r}; give a whole number >= 1")
        self.every = every
        self.pool_size = pool_size
        self.pool: list[PolicySnapshot] = []
        self.last_refresh = -1
        self.refreshes = 0
        self._algo = ""
        self._algo_config: dict[str, Any] = {}
        self._restored: dict[str, Any] | None = None
        #: the versions every env's pool holds since the last push (None: send the whole pool)
        self._sent: list[int] | None = None
        #: whether the envs report ``self_play_versions`` (False: always the whole pool)
        self._deltas = True

    def rlblocks_configure(self, config: dict, run_dir: Any) -> None:
        self._algo = str(config["algo_name"])
        self._algo_config = dict(config.get("algo") or {})

    def rlblocks_rollout_end(self, stats: Mapping[str, Any], env_step: int, trainer: Any) -> None:
        step = int(trainer.state.gradient_step)
        if self._restored is not None:
            self._restore(trainer)
        elif self.last_refresh < 0 or step - self.last_refresh >= self.every:
            self.refresh(trainer.policy, step)
        else:
            return
        self.push(trainer.train_collector.envs)

    def refresh(self, policy: Any, gradient_step: int) -> None:
        """Add a copy of ``policy`` to the pool (dropping the oldest beyond ``pool_size``)."""
        version = self.pool[-1].version + 1 if self.pool else 0
        self.pool.append(PolicySnapshot.of(policy, self._algo, self._algo_config, version))
        del self.pool[: -self.pool_size]
        self.last_refresh = int(gradient_step)
        self.refreshes += 1

    def push(self, envs: Any) -> None:
        """Bring every env of ``envs`` (a vector env with ``set_attr``) to the pool: what
        changed since the last push where an env has the pool sent then, else the whole pool."""
        set_attr = getattr(envs, "set_attr", None)
        if set_attr is None:
            raise ConfigError(
                f"self-play needs a vector env that can set env attributes (set_attr); "
                f"{type(envs).__name__} cannot: use the dummy, subproc, shmem or ray backend"
            )
        versions = [s.version for s in self.pool]
        held = self._held(envs) if self._sent is not None else None
        if held is None:
            set_attr("self_play_pool", list(self.pool))
        else:
            sent = set(self._sent or ())
            update = {
                "add": [s for s in self.pool if s.version not in sent],
                "drop": [v for v in sent if v not in set(versions)],
            }
            same = [i for i, h in enumerate(held) if h == self._sent]
            behind = [i for i, h in enumerate(held) if h != self._sent]
            if same and (update["add"] or update["drop"]):
                set_attr("self_play_update", update, None if not behind else same)
            if behind:
                set_attr("self_play_pool", list(self.pool), None if not same else behind)
        self._sent = versions

    def _held(self, envs: Any) -> list[list[int]] | None:
        """Each env's pool versions, or None when the envs cannot say (then the whole pool
        goes to every env)."""
        get_attr = getattr(envs, "get_attr", None)
        if not self._deltas or get_attr is None:
            return None
        try:
            return [[int(v) for v in h] for h in get_attr("self_play_versions")]
        except (EnvWorkerError, AttributeError, TypeError):
            self._deltas = False  # envs of one's own with a pool setter only
            return None

    def rlblocks_checkpoint_save(self, checkpoint: dict) -> None:
        checkpoint["self_play"] = {
            "versions": [s.version for s in self.pool],
            "states": [s.state for s in self.pool],
            "last_refresh": self.last_refresh,
            "refreshes": self.refreshes,
        }

    def rlblocks_checkpoint_load(self, checkpoint: Mapping[str, Any], trainer: Any) -> None:
        """Take the pool back from the checkpoint and send it to the training envs at once,
        before the run restores their games (which may be played against one of its copies);
        without a training collector (``trainer`` None), at the first collect's end. (No
        default for ``trainer``: the hook manager passes only arguments without one.)"""
        saved = checkpoint.get("self_play")
        if not isinstance(saved, Mapping):
            return
        self._restored = dict(saved)
        collector = getattr(trainer, "train_collector", None)
        if collector is not None:
            self._restore(trainer)
            self.push(collector.envs)

    def _restore(self, trainer: Any) -> None:
        saved, self._restored = self._restored, None
        assert saved is not None
        policy = trainer.policy
        self.pool = [
            PolicySnapshot(v, self._algo, self._algo_config, policy.observation_space,
                           policy.action_space, s)
            for v, s in zip(saved["versions"], saved["states"], strict=True)
        ]  # fmt: skip
        self.last_refresh = int(saved["last_refresh"])
        self.refreshes = int(saved["refreshes"])
        self._sent = None  # the envs were made again: they get the whole pool


# -- playing games outside training ------------------------------------------------------------
def play_games(
    player: Any,
    game: str = "games/tictactoe_v3",
    opponent: Any = "random",
    n: int = 100,
    seed: int = 0,
    seat: str = "alternate",
) -> dict[str, float]:
    """Play ``n`` games of ``game`` (a ``games/`` id or an AEC constructor ``module:env``) with
    ``player`` in the learner's seat against ``opponent``; the learner's win, draw and loss
    rates, ``{"win": .., "draw": .., "loss": .., "illegal": ..}`` (``illegal``: the share of
    games in which the player made an illegal move, which loses the game).

    ``player`` is an :class:`rlblocks.run.Agent` (``rlblocks.load(run)``; acts greedily), a
    policy (wrapped in one) or a function ``observation -> action``."""
    if n < 1:
        raise ConfigError(f"n={n}: play at least one game")
    act = _player_function(player)
    ctor = GAMES.get(game.removeprefix(f"{GAME_NAMESPACE}/"), game)
    env = GameEnv(ctor, opponent=opponent, seat=seat)
    counts = dict.fromkeys(OUTCOMES, 0)
    illegal = 0
    try:
        obs, _ = env.reset(seed=seed)
        for _ in range(n):
            while True:
                obs, _r, terminated, truncated, info = env.step(act(obs))
                if terminated or truncated:
                    counts[info["outcome"]] += 1
                    illegal += bool(info.get("illegal_move"))
                    break
                illegal_now = info.get("illegal_move")
                assert not illegal_now  # an illegal move always ends the game
            obs, _ = env.reset()
    finally:
        env.close()
    return {**{k: v / n for k, v in counts.items()}, "illegal": illegal / n}


def _player_function(player: Any) -> Callable[[Any], Any]:
    if callable(getattr(player, "act", None)):
        return player.act
    if callable(getattr(player, "map_action", None)):  # an rlblocks policy
        from rlblocks.run import Agent

        return Agent(player, None).act
    if callable(player):
        return player
    raise ConfigError(
        f"player {player!r}: give an rlblocks Agent (rlblocks.load(run)), a policy, or a "
        "function observation -> action"
    )


def _register() -> None:
    for name, ctor in GAMES.items():
        env_id = f"{GAME_NAMESPACE}/{name}"
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="rlblocks_family_pettingzoo.games:GameEnv",
                kwargs={"game": ctor},
            )


_register()
