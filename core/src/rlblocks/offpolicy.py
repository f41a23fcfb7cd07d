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
``target_value`` (the bootstrap value of next observations) and ``learn`` (its losses).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.batch import Batch
from rlblocks.nets.encoders import ObsEncoder, make_encoder, obs_to_tensor
from rlblocks.policy import BasePolicy
from rlblocks.protocols import Buffer
from rlblocks.returns import nstep_return

__all__ = ["OffPolicyPolicy"]


class OffPolicyPolicy(BasePolicy):
    """Base of the replay-based algorithms. ``config`` must have ``gamma`` and ``n_step``.

    Subclasses register each optimizer with :meth:`~rlblocks.policy.BasePolicy.add_optimizer`
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

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """``batch.returns`` = the n-step TD target (a tensor ``[B]``): real rewards up to
        ``n_step`` steps along the episode, then ``gamma^m * target_value`` unless the episode
        terminated (truncated and unfinished episodes bootstrap)."""
        c = self.config
        if c.n_step == 1:
            # the sampled row is its own bootstrap row: nothing to walk or read again
            partial = np.asarray(batch.rew, dtype=np.float32)
            discount = np.where(np.asarray(batch.terminated, dtype=bool), 0.0, c.gamma)
            obs_next = batch.obs_next
        else:
            partial, boot_idx, discount = nstep_return(buffer, indices, c.gamma, c.n_step)
            obs_next = buffer.get(boot_idx, "obs_next")
        with torch.no_grad():
            value = self.target_value(self.obs_tensor(obs_next))
        batch.returns = self.as_tensor(partial) + self.as_tensor(discount) * value
        return batch

    def weights(self, batch: Batch) -> torch.Tensor | None:
        """Importance weights ``[B]`` of a prioritized sample (None for uniform samples)."""
        weight = batch.get("weight", None)
        return None if weight is None else self.as_tensor(weight)
