"""BasePolicy: the part every algorithm shares (update cycle, state flags, action mapping).

An algorithm subclasses it and writes ``forward`` and ``learn`` (and ``process_fn`` when its
targets need the buffer's time structure, e.g. n-step or GAE). The seed's state table:

=================  ==============  ==============
state              ``training``    ``updating``
=================  ==============  ==============
collecting         True            False
updating           True            True
testing            False           False
=================  ==============  ==============
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.algo._intrinsic import Curiosity, IntrinsicRewardView, make_curiosity
from rlblocks.algo._optim import FiniteWatch, OptimizerStep
from rlblocks.algo.nets import describe_part
from rlblocks.contracts import (
    Batch,
    Buffer,
    BufferAbilities,
    ConfigError,
    ViewRequirement,
    training_views,
)


def _check_scalable(space: gym.spaces.Box) -> None:
    """Scaling network actions from [-1, 1] to [low, high] needs finite bounds."""
    bad = ~(np.isfinite(space.low) & np.isfinite(space.high))
    if bad.any():
        where = np.argwhere(bad).tolist()
        raise ConfigError(
            f"the action space {space} is unbounded at {where[:8]}: scaling network actions "
            "from [-1, 1] to [low, high] needs finite bounds (NaN actions otherwise); bound the "
            "env's action space, or turn scaling off where the algorithm has it "
            "(--set algo.action_scaling=false)"
        )


def _index_offset(space: gym.Space) -> Any:
    """The env action of network index 0 of a Discrete (an int) or MultiDiscrete (an array per
    dimension) space: its ``start``. None for other spaces and for a start of 0 everywhere, so
    those map actions at no cost."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.start) or None
    if isinstance(space, gym.spaces.MultiDiscrete):
        start = np.asarray(space.start, dtype=np.int64)
        return start if start.any() else None
    return None


class BasePolicy(nn.Module):
    """Shared policy machinery. Subclasses implement :meth:`forward` and :meth:`learn`."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: str | torch.device = "cpu",
        action_scaling: bool = True,
        action_bound_method: str = "clip",
    ) -> None:
        super().__init__()
        if action_bound_method not in {"clip", "tanh", "none"}:
            raise ValueError(
                f"action_bound_method={action_bound_method!r}; use 'clip', 'tanh' or 'none'"
            )
        self.observation_space = observation_space
        self.action_space = action_space
        self.device = torch.device(device)
        self.updating = False
        self.env_step = 0
        #: Extra columns this policy's batches carry (RLlib's trajectory views); the collector
        #: builds the acting ones, ``update`` the training ones. Empty: just the stored columns.
        self.view_requirements: dict[str, ViewRequirement] = {}
        self.action_scaling = action_scaling and isinstance(action_space, gym.spaces.Box)
        if self.action_scaling:
            _check_scalable(action_space)
        self.action_bound_method = action_bound_method
        #: a discrete space's ``start`` (None when 0): networks act by index from 0, the env
        #: gets ``start + index`` (see :meth:`map_action`)
        self._index_offset = _index_offset(action_space)
        self._rng = np.random.default_rng()
        self._abilities: tuple[Any, BufferAbilities] = (None, BufferAbilities())
        self.gradient_steps = 0
        #: every optimizer by name: checkpointed and told the env step (LR schedules) by core
        self.optim_steps: dict[str, OptimizerStep] = {}
        #: the parts of the networks a user gave (``{"actor": "module:qualname"}``), for the
        #: run's record: rebuilding such a policy from its config needs them again
        self.custom_networks: dict[str, str] = {}
        #: the intrinsic reward (``algo.intrinsic``) added to every batch learned from; None:
        #: the env's reward only (see :meth:`enable_intrinsic`)
        self.curiosity: Curiosity | None = None

    #: whether the sampled batches this policy learns from are rows of transitions, which an
    #: intrinsic reward reads (False for one that samples windows of sequences, as R2D2)
    takes_intrinsic: bool = True

    def enable_intrinsic(self, config: Any) -> None:
        """Build the intrinsic reward ``config.intrinsic`` names (``"icm"``), if any; the
        policy bases call it from their constructors, so every algorithm of theirs takes it.
        Its optimizer is registered as ``"icm"`` (checkpointed, watched for NaN)."""
        if getattr(config, "intrinsic", None) is not None and not self.takes_intrinsic:
            raise ConfigError(
                f"{type(self).__name__} learns from sampled sequence windows, which "
                f"algo.intrinsic={config.intrinsic!r} does not read yet; leave algo.intrinsic "
                "unset, or use an algorithm that samples transitions (dqn, ppo; rppo for memory)"
            )
        self.curiosity = make_curiosity(
            config, self.observation_space, self.action_space, self.device
        )
        if self.curiosity is not None:
            self.add_optimizer("icm", self.curiosity.optim_step)

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> BasePolicy:
        # ``.to(device)`` and friends move the curiosity module too (it is not a submodule)
        super()._apply(fn, *args, **kwargs)
        if self.__dict__.get("curiosity") is not None:
            self.curiosity.module._apply(fn, *args, **kwargs)
            self.curiosity.device = self.device
        return self

    def note_networks(self, **given: Any) -> None:
        """Record which network parts a user gave (those not None) in :attr:`custom_networks`."""
        for name, part in given.items():
            if part is not None:
                self.custom_networks[name] = describe_part(part)

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Return ``Batch(act=..., state=..., policy=...)`` for ``batch.obs`` of shape [B, ...]."""
        raise NotImplementedError

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        """Add exploration to actions chosen while collecting for training (default: none)."""
        return act

    def map_action(self, act: np.ndarray) -> np.ndarray:
        """Turn network actions into env actions. Discrete and MultiDiscrete: a policy acts,
        stores and learns by index from 0 (the logit or Q-value it reads), the env gets
        ``start + index`` per dimension (nothing is added for a start of 0). Box: bound them
        (``clip`` to [-1, 1], or ``tanh``) and scale [-1, 1] to the space's [low, high] when
        ``action_scaling``; without scaling ``clip`` clips to [low, high] itself."""
        offset = self._index_offset
        if offset is not None:
            return act + offset
        space = self.action_space
        if not isinstance(space, gym.spaces.Box):
            return act
        if self.action_bound_method == "clip":
            if self.action_scaling:
                act = np.clip(act, -1.0, 1.0)
            else:
                act = np.clip(act, space.low, space.high)
        elif self.action_bound_method == "tanh":
            act = np.tanh(act)
        if self.action_scaling:
            low, high = space.low, space.high
            act = low + (high - low) * (act + 1.0) / 2.0
        return act.astype(space.dtype, copy=False)

    #: the policy acts on a grid of a Box (discretised actions): random warm-up actions, drawn
    #: in env units, are snapped to the grid before the env runs them, so the env executes
    #: exactly the action the buffer stores
    quantized_actions: bool = False

    def map_action_inverse(self, act: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`map_action`: env actions back to network units (for random warm-up
        actions, which are sampled in env units but stored in network units): discrete ones
        less the space's ``start`` (indices from 0); Box ones unscaled to [-1, 1] with
        ``action_scaling`` (0 on a dimension whose low equals its high), then ``arctanh`` under
        ``tanh`` bounding (the bounds themselves map to +-arctanh(1 - 1e-6))."""
        offset = self._index_offset
        if offset is not None:
            return np.asarray(act) - offset
        if not isinstance(self.action_space, gym.spaces.Box):
            return act
        if self.action_scaling:
            low, high = self.action_space.low, self.action_space.high
            span = np.where(high > low, high - low, np.inf)
            act = (act - low) * 2.0 / span - (high > low)
        if self.action_bound_method == "tanh":
            act = np.arctanh(np.clip(act, -1.0 + 1e-6, 1.0 - 1e-6))
        return act

    def set_env_step(self, env_step: int) -> None:
        """Told by the trainer before each collect; schedules (epsilon, lr) read ``env_step``."""
        self.env_step = env_step
        for step in self.optim_steps.values():
            step.set_env_step(env_step)

    def add_optimizer(self, name: str, step: OptimizerStep) -> OptimizerStep:
        """Register an optimizer step under ``name`` (saved in checkpoints, follows its learning
        rate schedule); returns it."""
        self.optim_steps[name] = step
        step.name = name
        return step

    def watch_finite(self, skip: bool = False) -> FiniteWatch:
        """Watch the registered optimizers' losses and gradients and every parameter for NaN
        and infinite values (the trainer does, checking once per iteration); with ``skip`` a
        step whose loss or gradients are not finite is not applied. See
        :class:`~rlblocks.algo.FiniteWatch`."""
        return FiniteWatch(self.optim_steps, self.named_parameters(), skip=skip)

    def schedule_stats(self) -> dict[str, float]:
        """The current values of the policy's schedules, logged with each update's statistics:
        ``lr/<name>`` of every registered optimizer. An algorithm with a schedule of its own
        (DQN's exploration epsilon) extends it."""
        return {f"lr/{name}": step.lr for name, step in self.optim_steps.items()}

    def seed(self, seed: int | None) -> None:
        """Seed the policy's own numpy generator (exploration noise)."""
        self._rng = np.random.default_rng(seed)

    # -- learning -----------------------------------------------------------------------------
    def set_dataset(self, dataset: Buffer) -> None:
        """Give an online algorithm that also learns from a dataset (its spec says
        ``uses_dataset``: GAIL's expert demonstrations) the buffer that holds it; a run calls
        it with ``buffer.dataset`` before training. Other algorithms take none."""
        raise ConfigError(
            f"{type(self).__name__} learns from no dataset besides its own experience; an "
            "offline algorithm trains on one with OfflineTrainer (pass it as the trainer's "
            "buffer), and an online one that takes one says uses_dataset in its spec"
        )

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """Compute targets that need the buffer's time structure (n-step, GAE). Default: none."""
        return batch

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        """One learning step on a processed batch; return scalar statistics."""
        raise NotImplementedError

    def post_process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> None:
        """After learning: hand new priorities to buffers that take them
        (:class:`~rlblocks.contracts.PrioritizedBuffer`)."""
        if "td_error" in batch and self.buffer_abilities(buffer).prioritized:
            td = batch.td_error
            if isinstance(td, torch.Tensor):  # copied to the host only when a buffer wants it
                td = td.detach().cpu().numpy()
            buffer.update_priority(indices, td)  # type: ignore[attr-defined]

    def buffer_abilities(self, buffer: Buffer) -> BufferAbilities:
        """The optional abilities of ``buffer``, checked once per buffer (not per update)."""
        if isinstance(buffer, IntrinsicRewardView):  # the buffer behind the reward view
            buffer = buffer.source
        known, abilities = self._abilities
        if known is None or known() is not buffer:
            abilities = BufferAbilities.of(buffer)
            self._abilities = (weakref.ref(buffer), abilities)
        return abilities

    def update(self, sample_size: int, buffer: Buffer | None, **kwargs: Any) -> dict[str, float]:
        """Sample, then ``process_fn -> learn -> post_process_fn``. ``sample_size=0`` uses the
        whole buffer in time order (on-policy algorithms)."""
        if buffer is None:
            raise ConfigError(
                "update() needs the buffer to learn from, got None; pass the buffer the "
                "collector filled"
            )
        if (
            isinstance(sample_size, bool)
            or not isinstance(sample_size, int | np.integer)
            or (sample_size < 0)
        ):
            raise ConfigError(
                f"sample_size must be a whole number >= 0 (0: the whole buffer in time order), "
                f"got {sample_size!r}"
            )
        if len(buffer) == 0:
            warnings.warn(
                "update() got an empty buffer, so it learned nothing; collect steps into the "
                "buffer first",
                UserWarning,
                stacklevel=2,
            )
            return {}
        batch, indices = buffer.sample(sample_size)
        if self.view_requirements:
            # acting views come back as the collector stored them, the others from the links
            views = training_views(
                buffer,
                indices,
                self.view_requirements,
                self.observation_space,
                self.action_space,
                batch=batch,
            )
            batch.update(views)
        # A buffer that rewrites what it samples (hindsight relabelling) hands process_fn a view
        # whose reads follow the rewritten rows, so n-step or GAE targets see the same data.
        relabels = self.buffer_abilities(buffer).relabelling
        source = buffer.batch_view(batch, indices) if relabels else buffer  # type: ignore[attr-defined]
        return self._learn_sampled(batch, source, buffer, indices, **kwargs)

    def _learn_sampled(
        self, batch: Batch, source: Any, buffer: Buffer, indices: np.ndarray, **kwargs: Any
    ) -> dict[str, Any]:
        """``process_fn`` (reading ``source``) -> ``learn`` -> ``post_process_fn`` on a sampled
        batch, with the updating flag set."""
        self.updating = True
        try:
            if self.curiosity is not None:
                # intrinsic rewards before any target is computed: in the batch and in every
                # reward process_fn reads from the buffer (GAE, n-step)
                batch, source = self.curiosity.prepare(batch, source)
            batch = self.process_fn(batch, source, indices)
            stats = self.learn(batch, **kwargs)
            self.post_process_fn(batch, buffer, indices)
            if self.curiosity is not None:  # the module's own step, then its statistics
                stats = {**stats, **self.curiosity.finish()}
        finally:
            self.updating = False
        return stats

    # -- helpers ------------------------------------------------------------------------------
    def as_tensor(self, x: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A numpy array (or tensor) as a tensor on this policy's device, without a copy when
        possible."""
        return torch.as_tensor(x, dtype=dtype, device=self.device)

    def extra_state(self) -> dict[str, Any]:
        """Non-parameter state to checkpoint (optimizers, counters); override and extend."""
        return {
            "env_step": self.env_step,
            "gradient_steps": self.gradient_steps,
            "optimizers": {name: s.state_dict() for name, s in self.optim_steps.items()},
            # exploration noise continues its stream on resume instead of restarting it
            "rng": self._rng.bit_generator.state,
            # a temporally correlated exploration process (OU noise) continues where it was
            "noise": _noise_state(getattr(self, "noise", None)),
            # the curiosity module's weights (not a submodule, so not in state_dict)
            "intrinsic": self.curiosity.state_dict() if self.curiosity is not None else None,
        }

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`extra_state` returned."""
        self.env_step = int(state.get("env_step", 0))
        self.gradient_steps = int(state.get("gradient_steps", 0))
        saved = state.get("optimizers", {})
        if isinstance(saved, list):  # checkpoints of rlblocks 0.1: optimizer states in order
            saved = {n: {"optim": o} for n, o in zip(self.optim_steps, saved)}
        for name, opt_state in saved.items():
            if name in self.optim_steps:
                self.optim_steps[name].load_state_dict(opt_state)
        rng = state.get("rng")
        if (
            isinstance(rng, Mapping)
            and rng.get("bit_generator") == type(self._rng.bit_generator).__name__
        ):
            self._rng.bit_generator.state = dict(rng)
        noise = getattr(self, "noise", None)
        saved_noise = state.get("noise")
        if saved_noise is not None and hasattr(noise, "load_state_dict"):
            noise.load_state_dict(saved_noise)
        saved_intrinsic = state.get("intrinsic")
        if saved_intrinsic is not None and self.curiosity is not None:
            self.curiosity.load_state_dict(saved_intrinsic)


def _noise_state(noise: Any) -> Any:
    """An exploration-noise object's state (None when it has none to keep)."""
    return noise.state_dict() if hasattr(noise, "state_dict") else None
