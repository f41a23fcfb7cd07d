"""What replay-based algorithms share: n-step TD targets from the buffer's episode links,
optimizers and target networks registered by name (so checkpoints and learning-rate schedules
need no per-algorithm code), and the encoders of raw observations.

Data path of one gradient step (``policy.update(batch_size, buffer)``)::

    buffer.sample -> process_fn:  nstep_return(buffer, indices) -> partial [B], bootstrap index,
                                  discount [B];  returns = partial + discount * target_value(obs')
                  -> learn:       the algorithm's losses on batch.obs, batch.act, batch.returns
                                  (and batch.weight from a prioritized sampler)
                  -> post_process_fn: batch.td_error to a buffer that takes priorities

An algorithm subclasses :class:`OffPolicyPolicy` and writes ``forward`` (acting),
``target_value`` (the bootstrap value of next observations) and ``learn`` (its losses). With a
``cuda_graph`` field in its config it may have its step captured on a GPU; if ``learn`` then
branches on a host counter (a delayed actor step), ``graph_phase`` names the branch.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Hashable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.algo._cuda_graph import StepGraph, graph_refusal
from rlblocks.algo._policy import BasePolicy
from rlblocks.algo._returns import nstep_return
from rlblocks.algo.nets import ObsEncoder, make_encoder, obs_to_tensor
from rlblocks.contracts import Batch, Buffer

__all__ = ["OffPolicyPolicy"]


class OffPolicyPolicy(BasePolicy):
    """Base of the replay-based algorithms. ``config`` must have ``gamma`` and ``n_step``.

    Subclasses register each optimizer with :meth:`~rlblocks.algo.BasePolicy.add_optimizer`
    (checkpointed and told the env step by name) and implement :meth:`target_value` and
    :meth:`learn`.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any,
        device: str | torch.device = "cpu",
        action_scaling: bool = True,
        action_bound_method: str = "clip",
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            device=device,
            action_scaling=action_scaling,
            action_bound_method=action_bound_method,
        )
        self.config = config
        #: the captured gradient step (``config.cuda_graph``), made at the first update
        self._step_graph: StepGraph | None = None
        #: why the step stays eager, once known (``(weakref to the buffer, reason or None)``)
        self._graph_refused: tuple[Any, str | None] | None = None
        self._told_eager = False  # the warning that the step stays eager on a GPU: once

    # -- building blocks ----------------------------------------------------------------------
    def make_encoder(self) -> ObsEncoder:
        """A fresh encoder of this policy's observation space (``config.images`` decides
        whether image Boxes go through a CNN)."""
        return make_encoder(self.observation_space, images=getattr(self.config, "images", "cnn"))

    def obs_tensor(self, obs: Any) -> Any:
        """Observations (arrays, or dicts / tuples of arrays) as tensors on the policy's device."""
        return obs_to_tensor(obs, self.device)

    @property
    def act_dim(self) -> int:
        """Number of action dimensions of a Box action space."""
        return int(np.prod(self.action_space.shape))

    # -- targets ------------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """The bootstrap value ``[B]`` of next observations (tensors) for the TD target; called
        under ``torch.no_grad``."""
        raise NotImplementedError

    def target_parts(
        self, batch: Batch, buffer: Buffer, indices: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, Any]:
        """The host's share of the n-step TD target of sampled rows: the partial return
        ``[B]`` (real rewards up to ``n_step`` steps along the episode), the discount ``[B]``
        of the bootstrap value (``gamma^m``, 0 where the episode terminated; truncated and
        unfinished episodes bootstrap) and the bootstrap rows' next observations. The target
        is ``partial + discount * target_value(obs_next)``."""
        c = self.config
        if c.n_step == 1:
            # the sampled row is its own bootstrap row: nothing to walk or read again
            partial = np.asarray(batch.rew, dtype=np.float32)
            discount = np.where(np.asarray(batch.terminated, dtype=bool), 0.0, c.gamma)
            return partial, discount.astype(np.float32), batch.obs_next
        partial, boot_idx, discount = nstep_return(
            buffer,
            indices,
            c.gamma,
            c.n_step,
            rebuilds_obs_next=self.buffer_abilities(buffer).rebuilds_obs_next,
        )
        return partial, discount, buffer.get(boot_idx, "obs_next")

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """``batch.returns`` = the n-step TD target (a tensor ``[B]``), from
        :meth:`target_parts`."""
        partial, discount, obs_next = self.target_parts(batch, buffer, indices)
        with torch.no_grad():
            value = self.target_value(self.obs_tensor(obs_next))
        batch.returns = self.as_tensor(partial) + self.as_tensor(discount) * value
        return batch

    # -- the gradient step --------------------------------------------------------------------
    def update(self, sample_size: int, buffer: Buffer | None, **kwargs: Any) -> dict[str, Any]:
        """The base class's step, or with ``config.cuda_graph`` on a CUDA device its captured
        replay (:class:`~rlblocks.algo.StepGraph`): the same arithmetic, launched at once."""
        graph = self._graph_for(sample_size, buffer) if not kwargs else None
        if graph is None:
            return super().update(sample_size, buffer, **kwargs)
        assert buffer is not None
        batch, indices = buffer.sample(sample_size)
        partial, discount, obs_next = self.target_parts(batch, buffer, indices)
        packed = Batch(
            obs=batch.obs, act=batch.act, partial=partial, discount=discount, obs_next=obs_next
        )
        if "weight" in batch:
            packed.weight = batch.weight
        if not graph.fits(packed):
            return self._learn_sampled(batch, buffer, buffer, indices)
        self.updating = True
        try:
            stats, td, replayed = graph.step(
                packed, lambda: self._learn_sampled(batch, buffer, buffer, indices)
            )
        finally:
            self.updating = False
        if replayed and td is not None:
            batch.td_error = td
            self.post_process_fn(batch, buffer, indices)
        return stats

    def _graph_for(self, sample_size: int, buffer: Buffer | None) -> StepGraph | None:
        """The step graph to use, or None for the eager step."""
        if not getattr(self.config, "cuda_graph", False) or buffer is None or sample_size <= 0:
            return None
        if len(buffer) == 0 or self.device.type != "cuda":
            return None
        known = self._graph_refused
        if known is None or known[0]() is not buffer:
            known = self._graph_refused = (weakref.ref(buffer), graph_refusal(self, buffer))
            self._tell_eager(known[1])
        if known[1] is not None:
            return None
        graph = self._step_graph
        if graph is None or graph.batch_size != sample_size or not graph.valid():
            graph = self._step_graph = StepGraph(self, sample_size)
        if graph.gave_up():
            reason = f"an optimizer took no fused-Adam step in {graph.calls} warm-up steps"
            self._graph_refused = (weakref.ref(buffer), reason)
            self._tell_eager(reason)
            return None
        return graph

    def _tell_eager(self, reason: str | None) -> None:
        """Warn once per policy that ``cuda_graph`` asked for a captured step on a GPU that
        runs eagerly instead (several times slower), with the reason and how to quiet it."""
        if reason is None or self._told_eager:
            return
        self._told_eager = True
        warnings.warn(
            f"{type(self).__name__} takes its gradient steps eagerly on {self.device}, not as "
            f"a captured CUDA graph: {reason}. Without that the captured step is several "
            "times faster (docs/benchmarks/gpu/update_rate.md); set algo.cuda_graph=false to "
            "run eagerly without this warning.",
            RuntimeWarning,
            stacklevel=2,
        )

    def graph_phase(self) -> Hashable:
        """What the host decides about the next gradient step, as a key: the captured step
        (``config.cuda_graph``) records one graph per key and replays the one of each step.
        None here: every step does the same. An algorithm whose ``learn`` branches on a host
        counter (a delayed actor step) returns that branch, computed as ``learn`` will."""
        return None

    def weights(self, batch: Batch) -> torch.Tensor | None:
        """Importance weights ``[B]`` of a prioritized sample (None for uniform samples)."""
        weight = batch.get("weight", None)
        return None if weight is None else self.as_tensor(weight)
