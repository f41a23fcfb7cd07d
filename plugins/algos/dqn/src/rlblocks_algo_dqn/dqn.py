"""DQN: Q-learning with a neural network, a replay buffer and a target network.

Target (n-step, partial-episode bootstrapping; core's :class:`~rlblocks.offpolicy.OffPolicyPolicy`
walks the episode and calls :meth:`DQNPolicy.target_value`)::

    y_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) Q_target(s_{t+m}, a*)
    a*  = argmax_a Q_online(s_{t+m}, a)   if double else   argmax_a Q_target(s_{t+m}, a)

with m <= n_step cut at the episode's end. Loss: Huber or MSE between Q(s_t, a_t) and y_t,
weighted by a prioritized sampler's importance weights.

Observations of any space go through core's :class:`~rlblocks.nets.ObsEncoder` inside the
Q-network: Box flattened, Discrete / MultiDiscrete one-hot from their ``start``, nested Dict and
Tuple concatenated, image Boxes through the Nature-DQN CNN (trained with the Q loss). A buffer
whose ``sample`` rewrites transitions (hindsight relabelling) offers ``batch_view(batch,
indices)``; ``BasePolicy.update`` hands that view to ``process_fn``, so the n-step walk sees the
rewritten goals and rewards on every step of the path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from rlblocks.batch import Batch
from rlblocks.nets import QNetwork
from rlblocks.offpolicy import OffPolicyPolicy
from rlblocks.optim import OptimizerStep
from rlblocks.target import TargetNetwork
from rlblocks_algo_dqn.config import DQNConfig


class DQNPolicy(OffPolicyPolicy):
    """DQN over discrete actions. ``model`` defaults to a :class:`QNetwork` over the default
    observation encoder; a custom model takes the observation tensors and returns ``[B, A]``."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DQNConfig | None = None,
        device: str | torch.device = "cpu",
        model: torch.nn.Module | None = None,
    ) -> None:
        config = config or DQNConfig()
        super().__init__(observation_space, action_space, config, device)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(
                f"DQN needs a Discrete action space, got {action_space}; "
                "for continuous actions use an actor-critic algorithm"
            )
        self.config = c = config
        self.num_actions = int(action_space.n)
        self.action_start = int(action_space.start)
        if model is None:
            encoder = self.make_encoder()
            model = QNetwork(
                encoder.out_dim,
                self.num_actions,
                hidden=c.hidden_sizes,
                dueling=c.dueling,
                activation=c.activation,
                encoder=encoder,
            )
        self.model = model.to(self.device)
        self.use_target = c.tau is not None or c.target_update_interval > 0
        self.target = (
            TargetNetwork(self.model, tau=c.tau, hard_update_interval=c.target_update_interval)
            if self.use_target
            else None
        )
        self.optim_step = self.add_optimizer(
            "q", OptimizerStep(self.model, c.lr, max_grad_norm=c.max_grad_norm)
        )

    @property
    def target_model(self) -> torch.nn.Module:
        """The network that values bootstrap targets (the online one when there is no target)."""
        return self.target.net if self.target is not None else self.model

    # -- acting -------------------------------------------------------------------------------
    def forward(
        self, batch: Batch, state: Any = None, model: str = "model", **kwargs: Any
    ) -> Batch:
        """Greedy actions: ``Batch(act [B], logits=q [B, A])``."""
        net = self.model if model == "model" else self.target_model
        q = net(self.obs_tensor(batch.obs))
        act = q.argmax(dim=1).cpu().numpy() + self.action_start
        return Batch(act=act, logits=q, state=state)

    @property
    def epsilon(self) -> float:
        """Exploration rate for the current state: the schedule while collecting for training,
        ``eps_test`` while testing."""
        c = self.config
        if not self.training:
            return c.eps_test
        if c.eps_decay_steps == 0:
            return c.eps_end
        frac = min(1.0, self.env_step / c.eps_decay_steps)
        return c.eps_start + frac * (c.eps_end - c.eps_start)

    def schedule_stats(self) -> dict[str, float]:
        return {**super().schedule_stats(), "epsilon": self.epsilon}

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        eps = self.epsilon
        if eps <= 0.0:
            return act
        explore = self._rng.random(len(act)) < eps
        if explore.any():
            act = act.copy()
            n = int(explore.sum())
            act[explore] = self.action_start + self._rng.integers(self.num_actions, size=n)
        return act

    # -- learning -----------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        q_target = self.target_model(obs_next)
        if self.config.double and self.use_target:
            best = self.model(obs_next).argmax(dim=1, keepdim=True)
        else:
            best = q_target.argmax(dim=1, keepdim=True)
        return q_target.gather(1, best).squeeze(1)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        q = self.model(self.obs_tensor(batch.obs))
        act = torch.as_tensor(batch.act, dtype=torch.long, device=self.device) - self.action_start
        q_taken = q.gather(1, act.view(-1, 1)).squeeze(1)
        target = batch.returns
        td = q_taken - target
        if self.config.loss == "huber":
            per_sample = F.smooth_l1_loss(q_taken, target, reduction="none")
        else:
            per_sample = td.pow(2)
        weight = self.weights(batch)
        if weight is not None:
            per_sample = per_sample * weight
        loss = per_sample.mean()
        self.optim_step.step(loss)
        self.gradient_steps += 1
        if self.target is not None:
            self.target.update()
        batch.td_error = td.detach().abs()
        return {"loss": loss.detach(), "q": q_taken.detach().mean()}

    # -- checkpoint ---------------------------------------------------------------------------
    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        if "optim" in state and "optimizers" not in state:  # checkpoints of rlblocks-algo-dqn 0.1
            state = {**state, "optimizers": [state["optim"]]}
        super().load_extra_state(state)
