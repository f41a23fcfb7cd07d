"""A trained agent back from its run: ``rlblocks.load(RUN_DIR)`` -> act, evaluate, record.

::

    agent = rlblocks.load("runs/dqn-CartPole-v1-...")          # best.pt, else an error
    action = agent.act(obs)                                   # one raw env observation
    actions = agent.act(obs_batch)                            # or a batch of them
    result = agent.evaluate(episodes=100, seed=0)             # per-episode returns and lengths
    agent.record("cartpole.mp4", episodes=2)                  # frames from render_mode="rgb_array"

``act`` does what the collector does between an env's observation and its ``step``: observation
layout (Tuple observations as dicts), the policy's forward pass in test mode (observation
normalisation lives inside the policy), and ``map_action`` (action scaling and bounding), so the
action goes straight into ``env.step``. Loading reads the run's ``config.json`` (plain data) and a
checkpoint through ``torch.load(weights_only=True)``: nothing in a run directory is executed.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import torch

from rlblocks.contracts import (
    Batch,
    CheckpointError,
    ConfigError,
    NonFiniteError,
    space_has_tuple,
    tuples_as_dicts,
    writable_file_problem,
)
from rlblocks.run._advice import option
from rlblocks.run._checkpoint import load_checkpoint, writing

__all__ = ["Agent", "EvalResult", "load"]

EnvArg = str | Callable[[], gym.Env] | Sequence[Callable[[], gym.Env]] | None


@attrs.define
class EvalResult:
    """Returns and lengths of whole evaluation episodes, in finishing order."""

    returns: np.ndarray
    lengths: np.ndarray
    outcomes: dict[str, int] = attrs.field(factory=dict)
    """Episodes per ``info["outcome"]`` (game envs: ``"win"``, ``"draw"``, ``"loss"``)."""
    agent_returns: dict[str, np.ndarray] = attrs.field(factory=dict)
    """Multi-agent envs: each agent's return in each episode (nan where it took no part), by
    agent id; ``returns`` are then the run's own test returns (its ``episode_return``: the
    mean over the agents by default). Empty for single-agent envs."""

    @property
    def total_returns(self) -> np.ndarray:
        """Each episode's return summed over its agents (the team's); ``returns`` for
        single-agent envs."""
        if not self.agent_returns:
            return self.returns
        return np.nansum(np.stack(list(self.agent_returns.values())), axis=0)

    @property
    def outcome_rates(self) -> dict[str, float]:
        """The learner's ``win_rate``, ``draw_rate`` and ``loss_rate`` (empty but for games)."""
        from rlblocks.collect import CollectStats

        return CollectStats(outcomes=self.outcomes).outcome_rates

    @property
    def mean(self) -> float:
        """Mean return (nan without episodes)."""
        return float(np.mean(self.returns)) if len(self.returns) else math.nan

    @property
    def std(self) -> float:
        """Standard deviation of the returns."""
        return float(np.std(self.returns)) if len(self.returns) else math.nan

    def __str__(self) -> str:
        rates = self.outcome_rates
        games = (
            ", " + ", ".join(f"{k.removesuffix('_rate')} {v:.0%}" for k, v in rates.items())
            if rates
            else ""
        )
        agents = ""
        if self.agent_returns and len(self.returns):
            total = self.total_returns
            per_agent = ", ".join(
                f"{agent} {float(np.nanmean(r)):.2f}" for agent, r in self.agent_returns.items()
            )
            agents = (
                f"; total return {float(np.mean(total)):.2f} +- {float(np.std(total)):.2f}, "
                f"per agent: {per_agent}"
            )
        return (
            f"{len(self.returns)} episodes: return {self.mean:.2f} +- {self.std:.2f}, "
            f"length {float(np.mean(self.lengths)) if len(self.lengths) else math.nan:.1f}"
            f"{games}{agents}"
        )


#: SDL's drivers for off-screen frames: pygame (classic control, Box2D) draws ``rgb_array`` frames
#: without a display or sound, and SDL then prints nothing about them (no "XDG_RUNTIME_DIR is
#: invalid" line)
_HEADLESS_SDL = {"SDL_VIDEODRIVER": "dummy", "SDL_AUDIODRIVER": "dummy"}


def headless_sdl() -> Callable[[], None]:
    """Point SDL at its dummy video and audio drivers, each only where the user has not chosen
    one; returns the function that puts the environment back. Frames for a video need no
    window, and SDL's messages about a missing display or runtime dir read like rlblocks'."""
    added = [k for k in _HEADLESS_SDL if k not in os.environ]
    for key in added:
        os.environ[key] = _HEADLESS_SDL[key]

    def restore() -> None:
        for key in added:
            if os.environ.get(key) == _HEADLESS_SDL[key]:
                del os.environ[key]

    return restore


class Agent:
    """A policy with the config it was trained with.

    Attributes:
        policy: the algorithm's policy (a ``torch.nn.Module``), in eval mode.
        config: the run's resolved :class:`~rlblocks.run.ExperimentConfig`.
        checkpoint: the file the weights came from (None for an agent made in memory).
        env_factory: the env factory of a run trained with ``train(env=callable)``, when the
            agent comes straight from that call (its default env for evaluate); None otherwise.
    """

    def __init__(
        self,
        policy: Any,
        config: Any,
        checkpoint: Path | None = None,
        env_factory: Callable[[], gym.Env] | None = None,
    ) -> None:
        self.policy = policy
        self.config = config
        self.checkpoint = checkpoint
        self.env_factory = env_factory
        self.policy.eval()

    # -- what it is ---------------------------------------------------------------------------
    @property
    def algo(self) -> str:
        """The algorithm's registry name."""
        return str(self.config.algo_name)

    @property
    def env_id(self) -> str:
        """The gymnasium id it was trained on."""
        return str(self.config.env.id)

    @property
    def frame_stack(self) -> int:
        """How many observations the policy sees stacked (the run's ``buffer.stack_num``)."""
        return int(getattr(self.config.buffer, "stack_num", 1))

    @property
    def observation_space(self) -> gym.Space:
        return self.policy.observation_space

    @property
    def action_space(self) -> gym.Space:
        return self.policy.action_space

    def __repr__(self) -> str:
        where = f" from {self.checkpoint}" if self.checkpoint else ""
        return f"Agent({self.algo} on {self.env_id}{where})"

    # -- acting -------------------------------------------------------------------------------
    def act(
        self,
        obs: Any,
        state: Any = None,
        deterministic: bool = True,
        return_state: bool = False,
    ) -> Any:
        """The env action for one raw observation, or for a batch of them (leading axis).

        ``deterministic`` acts as the run's tests do (the policy in test mode, no exploration
        noise; epsilon-greedy algorithms take their ``eps_test``); False samples as in training
        (the policy's own randomness and exploration noise).
        Recurrent policies take and give ``state``: pass ``return_state=True`` to get
        ``(action, state)`` and feed the state back with the next observation.
        """
        if self.policy.view_requirements:
            raise ConfigError(
                f"{self.algo} reads trajectory views (histories of past steps), which one "
                "observation does not carry; use agent.evaluate(...) or an rlblocks.Collector"
            )
        batch_obs, single = _as_batch(obs, self.observation_space)
        if not _finite_tree(batch_obs):
            raise NonFiniteError(
                "act() got an observation with NaN or infinite values, on which the policy's "
                "action means nothing; check what produced it (the env, a wrapper, your own "
                "preprocessing)"
            )
        was_training = self.policy.training
        self.policy.train(not deterministic)
        try:
            with torch.inference_mode():
                out = self.policy(Batch(obs=batch_obs), state)
                act = _numpy(out.act)
                if not deterministic:
                    act = self.policy.exploration_noise(act, out)
                env_act = self.policy.map_action(act)
        finally:
            self.policy.train(was_training)
        new_state = out.get("state", None) if isinstance(out, Batch) else None
        if single:
            env_act = env_act[0]
        return (env_act, new_state) if return_state else env_act

    __call__ = act

    def _record_act(self, obs: Any, state: Any, deterministic: bool) -> tuple[Any, Any]:
        """One step of :meth:`record`: the action, and the recurrent state to feed back with
        the next observation (None at an episode's start)."""
        return self.act(obs, state=state, deterministic=deterministic, return_state=True)

    # -- evaluating ---------------------------------------------------------------------------
    def evaluate(
        self,
        env: EnvArg = None,
        episodes: int = 10,
        seed: int | None = None,
        num_envs: int | None = None,
        backend: str = "dummy",
        deterministic: bool = True,
        render: bool = False,
        make_kwargs: Mapping[str, Any] | None = None,
    ) -> EvalResult:
        """Run ``episodes`` whole episodes and return their returns and lengths.

        ``env`` is a gymnasium id, a factory, or a list of factories (default: the training env
        with the run's ``make_kwargs``); ``num_envs`` envs run side by side (default: the run's
        number of test envs, at most ``episodes``). Episodes are stepped by the same collector
        the trainer tests with, so the numbers are the run's test numbers for the same seeds.
        ``render`` opens the env's human render mode (a window) and steps one env. The run's
        ``env.wrappers`` wrap its own env (not ``train_wrappers``: scores are the env's own), and
        a run that stacked frames (``buffer.stack_num``) acts on stacks here too.
        ``make_kwargs`` go to ``gymnasium.make`` over the run's own (an id only), e.g.
        ``{"opponent": "random"}`` for a game env; game envs report win/draw/loss counts
        (``result.outcomes``, ``result.outcome_rates``).
        """
        from rlblocks.collect import Collector
        from rlblocks.run._compose import make_vector_env

        if episodes <= 0:
            raise ConfigError(f"episodes must be positive, got {episodes}")
        _check_seed(seed)
        if num_envs is not None and num_envs < 1:
            raise ConfigError(f"num_envs must be at least 1, got {num_envs} (None: the run's own)")
        if render:
            env = self._factory(env, render_mode="human")
            num_envs = 1
        n = num_envs or min(episodes, max(1, int(self.config.env.num_test_envs)))
        source, kwargs = self._env_source(env)
        if make_kwargs:
            if not isinstance(source, str):
                raise ConfigError(
                    "make_kwargs go to gymnasium.make, so they need an env id (the run's own, "
                    "or env='Id'), not an env factory"
                )
            kwargs = {**(kwargs or {}), **dict(make_kwargs)}
        if isinstance(source, list):  # a list of factories brings its own number of envs
            n = len(source)
        wrappers = list(self.config.env.wrappers) if env is None else []
        envs = make_vector_env(backend, source, num_envs=n, make_kwargs=kwargs, wrappers=wrappers)
        try:
            self._check_env(envs.observation_space, envs.action_space, env)
            collector = Collector(
                self.policy,
                envs,
                None,
                exploration=not deterministic,
                seed=seed,
                frame_stack=self.frame_stack,
            )
            self.policy.train(not deterministic)
            try:
                stats = collector.collect(n_episode=episodes)
            finally:
                self.policy.eval()
        finally:
            envs.close()
        returns = np.asarray(stats.returns, dtype=np.float64)
        if returns.ndim > 1:  # vector rewards: one return per episode, summed over components
            returns = returns.reshape(len(returns), -1).sum(axis=1)
        return EvalResult(
            returns=returns,
            lengths=np.asarray(stats.lengths, dtype=np.int64),
            outcomes=dict(stats.outcomes),
        )

    def record(
        self,
        path: str | os.PathLike[str],
        env: EnvArg = None,
        episodes: int = 1,
        seed: int | None = None,
        fps: int | None = None,
        max_frames: int = 10_000,
        deterministic: bool = True,
    ) -> EvalResult:
        """Play ``episodes`` episodes in one env made with ``render_mode="rgb_array"`` and write
        the frames to ``path`` (``.mp4`` needs the ``imageio-ffmpeg`` package, ``.gif`` only
        ``imageio``: ``pip install rlblocks[video]``). Returns the episodes' returns."""
        path = Path(path)
        if path.suffix.lower() not in {".mp4", ".gif"}:
            raise ConfigError(f"video file {path} must end in .mp4 or .gif")
        if episodes < 1:
            raise ConfigError(f"episodes must be at least 1, got {episodes}")
        if fps is not None and fps <= 0:
            raise ConfigError(f"fps must be positive, got {fps} (None: the env's own rate)")
        try:
            import imageio.v2 as imageio
        except ImportError as exc:
            raise ConfigError(
                "writing videos needs imageio: pip install 'rlblocks[video]'"
            ) from exc
        if path.suffix.lower() == ".mp4":
            try:
                import imageio_ffmpeg  # noqa: F401
            except ImportError as exc:
                raise ConfigError(
                    "writing .mp4 needs imageio-ffmpeg: pip install 'rlblocks[video]' (or write "
                    "a .gif)"
                ) from exc
        if max_frames < 1:
            raise ConfigError(f"max_frames must be at least 1, got {max_frames}")
        _check_seed(seed)
        problem = writable_file_problem(path)  # before the episodes are played
        if problem is not None:
            raise ConfigError(f"cannot write the video: {problem}")
        restore = headless_sdl()  # SDL's own lines (XDG_RUNTIME_DIR...) would read as ours
        try:
            single = self._factory(env, render_mode="rgb_array")()
        except BaseException:
            restore()
            raise
        frames: list[np.ndarray] = []
        returns, lengths = [], []
        whole = 0  # episodes with every frame in the video
        try:
            rate = fps or int(single.metadata.get("render_fps") or 30)
            for k in range(episodes):
                obs, _ = single.reset(seed=None if seed is None else seed + k)
                stack = _FrameStack(self.frame_stack, obs)
                total, steps, done = 0.0, 0, False
                state = None  # a recurrent policy's memory, carried through the episode
                while not done:
                    frame = single.render()
                    if frame is None:
                        raise ConfigError(
                            f"{self.env_id} rendered nothing in rgb_array mode; it cannot be "
                            "recorded"
                        )
                    if len(frames) < max_frames:
                        frames.append(np.asarray(frame))
                    action, state = self._record_act(
                        stack.obs
                        if stack
                        else tuples_as_dicts(obs)
                        if isinstance(obs, tuple)
                        else obs,
                        state,
                        deterministic,
                    )
                    obs, rew, terminated, truncated, _ = single.step(action)
                    stack.push(obs)
                    total += float(np.sum(rew))
                    steps += 1
                    done = bool(terminated or truncated)
                if len(frames) < max_frames:
                    frames.append(np.asarray(single.render()))
                    whole += 1
                returns.append(total)
                lengths.append(steps)
        finally:
            single.close()
            restore()
        if whole < episodes:
            limit = option(f"max_frames={max_frames}", f"--max-frames {max_frames}")
            warnings.warn(
                f"the video {path} is cut at {max_frames} frames ({limit}): {whole} of "
                f"{episodes} episode(s) complete in it; raise the limit to keep them all "
                "(the returned returns and lengths are of the whole episodes)",
                stacklevel=2,
            )
        tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
        try:
            with writing(path, after="then record it again"):
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.suffix.lower() == ".gif":
                    imageio.mimsave(tmp, frames, duration=1000.0 / rate, loop=0)
                else:
                    imageio.mimsave(tmp, frames, fps=rate, macro_block_size=1)
                os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
        return EvalResult(np.asarray(returns), np.asarray(lengths, dtype=np.int64))

    # -- helpers ------------------------------------------------------------------------------
    def _env_source(self, env: EnvArg) -> tuple[Any, dict[str, Any] | None]:
        if env is None and self.env_factory is not None:
            return self.env_factory, None  # copies of the run's own envs
        if env is None:
            self._refuse_factory_run("evaluating it")
            return self.env_id, dict(self.config.env.make_kwargs or {})
        if isinstance(env, str):
            return env, None
        if callable(env):
            return env, None  # a factory: as many envs as the evaluation runs side by side
        return list(env), None

    def _check_env(self, observation_space: gym.Space, action_space: gym.Space, env: Any) -> None:
        """The env to play must have the spaces the policy was built for."""
        flat = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete,
                gym.spaces.MultiBinary)  # fmt: skip
        for what, got, want in (("observation", observation_space, self.observation_space),
                                ("action", action_space, self.action_space)):  # fmt: skip
            if not isinstance(want, flat):  # nested spaces travel converted; the policy checks
                continue
            shape = getattr(got, "shape", None)
            if what == "observation" and self.frame_stack > 1 and shape is not None:
                shape = (self.frame_stack, *shape)  # the policy acts on stacks of frames
            if type(got) is not type(want) or shape != want.shape or _other_values(got, want):
                raise ConfigError(
                    f"the env {env if env is not None else self.env_id!r} has the {what} space "
                    f"{got}, but this {self.algo} agent (trained on {self.env_id}) acts on "
                    f"{want}; evaluate it on an env with its spaces"
                )

    def _refuse_factory_run(self, what: str) -> None:
        """The run's own env cannot be rebuilt when it came from a factory: say so."""
        if getattr(self.config.env, "factory", None) is not None:
            how = option(
                f"pass env=<the factory> (or an env id, e.g. {self.env_id!r}, to use that env as "
                "registered)",
                f"the command line cannot make it, but it can play an env as registered: "
                f"--env {self.env_id}",
            )
            raise ConfigError(factory_env_message(self.config, what, how))

    def _factory(self, env: EnvArg, render_mode: str) -> Callable[[], gym.Env]:
        """One factory for an env made with ``render_mode`` (the run's own: its make kwargs and
        wrappers)."""
        from rlblocks.run._compose import make_env_fns

        if env is None:
            self._refuse_factory_run("recording it")
        if env is None or isinstance(env, str):
            env_id = env or self.env_id
            kwargs = dict(self.config.env.make_kwargs or {}) if env is None else {}
            wrappers = list(self.config.env.wrappers) if env is None else []
            kwargs["render_mode"] = render_mode
            return make_env_fns(env_id, 1, kwargs, wrappers)[0]
        raise ConfigError(
            "rendering or recording needs a gymnasium id (it makes the env with render_mode); "
            "got a factory: make your env with render_mode yourself"
        )


class _FrameStack:
    """The last ``k`` observations of one env, the first repeated at the start (what the
    collector hands a policy that stacks frames); falsy when ``k == 1``."""

    def __init__(self, k: int, first: Any) -> None:
        self.k = k
        self.obs = self._repeat(first) if k > 1 else None

    def _repeat(self, first: Any) -> Any:
        if isinstance(first, Mapping):  # a Dict observation stacks each key
            return {key: self._repeat(value) for key, value in first.items()}
        return np.repeat(np.asarray(first)[None], self.k, axis=0)

    def __bool__(self) -> bool:
        return self.k > 1

    @classmethod
    def _pushed(cls, stack: Any, obs: Any) -> Any:
        if isinstance(stack, dict):
            return {key: cls._pushed(sub, obs[key]) for key, sub in stack.items()}
        return np.concatenate([stack[1:], np.asarray(obs)[None]])

    def push(self, obs: Any) -> None:
        if self.obs is not None:
            self.obs = self._pushed(self.obs, obs)


def _numpy(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _check_seed(seed: Any) -> None:
    """An env seed is None or a whole number >= 0 (gymnasium refuses negative ones)."""
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError(f"seed must be a whole number >= 0 (or None), got {seed!r}")


def _finite_tree(x: Any) -> bool:
    """Whether every float entry of an array (or a dict of them) is finite."""
    if isinstance(x, dict):
        return all(_finite_tree(v) for v in x.values())
    arr = np.asarray(x)
    return arr.dtype.kind not in "fc" or bool(np.isfinite(arr).all())


def _as_batch(obs: Any, space: gym.Space) -> tuple[Any, bool]:
    """``obs`` with a leading batch axis, and whether it was one observation."""
    if _looks_like_reset_output(obs, space):
        raise ConfigError(
            "act() got a pair (observation, info dict), what env.reset() returns; pass the "
            "observation alone: obs, info = env.reset(); action = agent.act(obs)"
        )
    single = _is_single(obs, space)
    tree = tuples_as_dicts(obs) if space_has_tuple(space) else obs

    def add_axis(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: add_axis(v) for k, v in x.items()}
        return np.asarray(x)[None]

    def as_arrays(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: as_arrays(v) for k, v in x.items()}
        return np.asarray(x)

    return (add_axis(tree) if single else as_arrays(tree)), single


def _looks_like_reset_output(obs: Any, space: gym.Space) -> bool:
    """Whether ``obs`` is ``env.reset()``'s ``(obs, info)`` rather than an observation: a pair
    whose second part is a dict, for a space that is no Tuple space, or for a Tuple space whose
    observations cannot have that shape (not two parts, or a second part that is no Dict or
    Tuple space, whose observations alone are dicts here)."""
    if not (isinstance(obs, tuple) and len(obs) == 2 and isinstance(obs[1], dict)):
        return False
    if not isinstance(space, gym.spaces.Tuple):
        return True
    nested = (gym.spaces.Dict, gym.spaces.Tuple)
    return len(space.spaces) != 2 or not isinstance(space.spaces[1], nested)


def _is_single(obs: Any, space: gym.Space) -> bool:
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, dict) or not space.spaces:
            raise ConfigError(f"expected a dict observation with keys {list(space.spaces)}")
        key = next(iter(space.spaces))
        return _is_single(obs[key], space.spaces[key])
    if isinstance(space, gym.spaces.Tuple):
        if isinstance(obs, dict):
            obs = tuple(obs[str(i)] for i in range(len(space.spaces)))
        if not isinstance(obs, tuple | list) or not space.spaces:
            raise ConfigError(f"expected a tuple observation of {len(space.spaces)} parts")
        return _is_single(obs[0], space.spaces[0])
    arr = np.asarray(obs)
    shape = tuple(space.shape or ())
    if arr.shape == shape:
        return True
    if arr.shape[1:] == shape:
        return False
    raise ConfigError(
        f"observation of shape {arr.shape} fits neither the space {space} (one observation) "
        f"nor a batch of them (shape [N, {', '.join(map(str, shape))}])"
    )


def _resolve(path: str | os.PathLike[str], which: str) -> tuple[Path, Path]:
    """(checkpoint file, config.json) for a run directory or a checkpoint file."""
    if which not in {"best", "latest"}:
        raise ConfigError(f"which must be 'best' or 'latest', got {which!r}")
    p = Path(path)
    if p.is_dir():
        run_dir = p
        ckpt = p / "checkpoints" / f"{which}.pt"
        if which == "latest":
            from rlblocks.run._checkpoint import GenerationStore, latest_checkpoint

            try:
                ckpt = latest_checkpoint(p)
            except CheckpointError:
                if GenerationStore(p / "checkpoints").generations():
                    raise  # generations, none intact: which one is damaged and how, not "none"
        if not ckpt.is_file():
            if which == "best":
                has_other = (
                    any((p / "checkpoints").glob("gen-*/latest.pt"))
                    or (p / "checkpoints" / "latest.pt").is_file()
                )
                other = "latest"
            else:
                has_other, other = (p / "checkpoints" / "best.pt").is_file(), "best"
            how = option(f"which={other!r}", f"--which {other}")
            hint = (
                f"; a {other} checkpoint exists: load it with {how}"
                if has_other
                else "; the run saved no checkpoint yet"
            )
            if not (p / "config.json").is_file():
                from rlblocks.run._rundir import replaced_run_note

                replaced = replaced_run_note(p)
                hint = (
                    f" and no config.json; {replaced}"
                    if replaced
                    else (" and no config.json: is it a run directory?")
                )
            raise CheckpointError(f"no checkpoints/{which}.pt in {p}{hint}")
    elif p.is_file():
        ckpt = p
        # RUN/best.pt-style files, RUN/checkpoints/X.pt and RUN/checkpoints/gen-N/latest.pt
        run_dir = next((d for d in p.parents[:3] if (d / "config.json").is_file()), p.parent)
    else:
        raise CheckpointError(f"{p} is neither a run directory nor a checkpoint file")
    config_file = run_dir / "config.json"
    if not config_file.is_file():
        raise CheckpointError(
            f"{ckpt} has no config.json beside it ({config_file}): the agent's algorithm and "
            "spaces come from the run's config"
        )
    return ckpt, config_file


def load(
    path: str | os.PathLike[str],
    which: str = "best",
    device: str | None = None,
    trust_imports: bool = False,
    networks: Mapping[str, Any] | None = None,
    policy_class: type | None = None,
) -> Agent:
    """The agent of a run directory (``which``: its ``best.pt`` or ``latest.pt``) or of one
    checkpoint file inside it; the networks go to ``device`` (default: cpu). A run whose env id
    names a module (``module:EnvId``) needs that module imported first, or ``trust_imports``;
    so does one whose config names an encoder (``algo.encoder``). A run trained with networks
    from Python (``train(networks=...)``) needs them again: ``networks={"actor": ...}``, the
    same modules or factories (the weights come from the checkpoint); one trained from a policy
    object of your own subclass needs the class again (``policy_class=``)."""
    from rlblocks.algo import optimizers_deferred
    from rlblocks.run import _config as cfg
    from rlblocks.run._compose import (
        make_env_fns,
        make_policy,
        resolve_device,
        spec_lookup,
        stacked_space,
    )
    from rlblocks.run._family import FamilyBuild, env_family
    from rlblocks.run._networks import check_networks_again, check_policy_class_again
    from rlblocks.run._trust import check_run_imports

    ckpt, config_file = _resolve(path, which)
    config = cfg.read_config(config_file, spec_lookup)
    dev = resolve_device(device or "cpu")
    env_id = config.env.id
    family = env_family(env_id)
    if family is not None and not family[0].loadable:
        raise ConfigError(
            f"{config_file.parent} trained on {env_id!r}, an env of the {family[0].name!r} "
            f"family ({family[0].summary}); rlblocks.load does not load its runs yet (the "
            "policy weights are in the run's checkpoints: best.pt, latest.pt)"
        )
    check_run_imports(config, trusted=trust_imports)
    networks = dict(networks or {})
    check_networks_again(
        config, networks, "loading it",
        f"rlblocks.load({str(config_file.parent)!r}, networks={{...}}) from Python",
    )  # fmt: skip
    check_policy_class_again(
        config, policy_class, "loading it",
        f"rlblocks.load({str(config_file.parent)!r}, policy_class=...) from Python",
    )  # fmt: skip
    if family is not None:
        # the family makes the env and the policy or policies (one per agent group)
        def family_policy(
            observation_space: gym.Space, action_space: gym.Space, state_space: Any = None
        ) -> Any:
            return make_policy(
                config.algo_name, observation_space, action_space, device=dev,
                config=config.algo, state_space=state_space, trust_imports=trust_imports,
                policy_class=policy_class, **networks,
            )  # fmt: skip

        def no_buffer(*_args: Any, **_kwargs: Any) -> Any:
            raise ConfigError("a loaded agent acts and has no replay buffer")

        with optimizers_deferred():
            agent = family[1].agent(
                FamilyBuild(
                    config=config, algo_spec=spec_lookup("algo", config.algo_name),
                    seed=int(config.run.seed), device=dev, make_policy=family_policy,
                    make_buffer=no_buffer,
                )
            )  # fmt: skip
        policy = agent.policy
    else:
        try:
            probe = make_env_fns(
                env_id, 1, dict(config.env.make_kwargs or {}), list(config.env.wrappers)
            )[0]()
        except gym.error.Error as exc:
            raise ConfigError(
                f"the run's env {env_id!r} cannot be made here ({exc}); install what provides it"
            ) from exc
        try:
            obs_space = stacked_space(probe.observation_space, config.buffer.stack_num)
            act_space = probe.action_space
        finally:
            probe.close()
        # an agent acts; its optimizers are built only if something trains it further
        with optimizers_deferred():
            policy = make_policy(
                config.algo_name, obs_space, act_space, device=dev, config=config.algo,
                trust_imports=trust_imports, policy_class=policy_class, **networks,
            )  # fmt: skip
        agent = Agent(policy, config)
    payload = load_checkpoint(ckpt, map_location=dev)
    state = payload.get("policy")
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{ckpt} holds no policy weights: it is not an rlblocks checkpoint (best.pt, or a "
            "generation's latest.pt)"
        )
    try:
        policy.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0]
        raise CheckpointError(
            f"{ckpt} does not fit {config.algo_name}'s networks as configured in "
            f"{config_file} ({first}); was the config edited after training?"
        ) from exc
    if "policy_extra" in payload:
        policy.load_extra_state(payload["policy_extra"])
    policy.eval()
    agent.checkpoint = ckpt
    return agent


def factory_env_message(config: Any, what: str, how: str) -> str:
    """The refusal for ``what`` (evaluating, resuming...) a run whose envs came from a factory
    without that factory: ``how`` says how to pass it."""
    return (
        f"this run was trained on envs made by the factory {config.env.factory} (env.id "
        f"{config.env.id} is only what it makes, without its wrappers or settings); {what} "
        f"needs it again: {how}"
    )


def _other_values(got: gym.Space, want: gym.Space) -> bool:
    """Whether two discrete spaces of one type hold other values (another ``n``, ``nvec`` or
    ``start``): the policy would send actions outside the env's space."""
    if isinstance(want, gym.spaces.Discrete) and isinstance(got, gym.spaces.Discrete):
        return got.n != want.n or got.start != want.start
    if isinstance(want, gym.spaces.MultiDiscrete) and isinstance(got, gym.spaces.MultiDiscrete):
        return not (np.array_equal(got.nvec, want.nvec) and np.array_equal(got.start, want.start))
    return False
