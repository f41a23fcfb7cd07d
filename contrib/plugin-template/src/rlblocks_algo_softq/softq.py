"""Discrete soft Q-learning: act by sampling softmax(Q / alpha), learn towards soft values."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from rlblocks.algo import BasePolicy, OptimizerStep, TargetNetwork, nstep_return
from rlblocks.algo.nets import MLP, obs_dim
from rlblocks.contracts import Batch, Buffer
from rlblocks_algo_softq.config import SoftQConfig


class SoftQPolicy(BasePolicy):
    """Soft Q-learning over discrete actions with an MLP Q-network and a Polyak target copy."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: SoftQConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, device=device)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(f"soft Q-learning needs a Discrete action space, got {action_space}")
        self.config = config = config or SoftQConfig()
        n_act = int(action_space.n)
        self.q = MLP(obs_dim(observation_space), config.hidden_sizes, n_act).to(self.device)
        # core's toolkit: a Polyak-averaged copy, and an optimizer step that checkpoints,
        # follows learning-rate schedules and can skip non-finite updates (add_optimizer)
        self.q_target = TargetNetwork(self.q, tau=config.tau)
        self.optim = self.add_optimizer("q", OptimizerStep(self.q, lr=config.lr))

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Sample ``a ~ softmax(Q(s) / alpha)``; argmax when testing with ``greedy_eval``."""
        q = self.q(self.as_tensor(batch.obs).flatten(1))
        if not self.training and self.config.greedy_eval:
            act = q.argmax(dim=1)
        else:
            act = torch.distributions.Categorical(logits=q / self.config.alpha).sample()
        return Batch(act=act.cpu().numpy(), state=state)

    @torch.no_grad()
    def _soft_value(self, obs: Any) -> np.ndarray:
        """V(s) = alpha * logsumexp(Q_target(s) / alpha)."""
        q = self.q_target(self.as_tensor(obs).flatten(1))
        alpha = self.config.alpha
        return (alpha * torch.logsumexp(q / alpha, dim=1)).cpu().numpy()

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """m-step soft targets; the core's ``nstep_return`` handles episode ends."""
        partial, boot_idx, discount = nstep_return(
            buffer, indices, self.config.gamma, self.config.n_step
        )
        boot_obs = buffer.get(boot_idx, "obs_next")
        batch.returns = (partial + discount * self._soft_value(boot_obs)).astype(np.float32)
        return batch

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        q = self.q(self.as_tensor(batch.obs).flatten(1))
        act = torch.as_tensor(batch.act, dtype=torch.long, device=self.device)
        q_taken = q.gather(1, act.view(-1, 1)).squeeze(1)
        loss = F.smooth_l1_loss(q_taken, self.as_tensor(batch.returns))
        self.optim.step(loss)
        self.q_target.update()
        return {"loss": loss.detach(), "q": q_taken.detach().mean()}
