"""Intrinsic rewards any algorithm can take: the intrinsic curiosity module (ICM).

Pathak et al. (2017), "Curiosity-driven Exploration by Self-supervised Prediction". A feature
encoder ``phi`` is trained by an *inverse* model to keep what the agent's actions change: it
predicts ``a_t`` from ``phi(s_t)`` and ``phi(s_t+1)`` (cross-entropy for Discrete actions, mean
squared error for Box ones). A *forward* model predicts ``phi(s_t+1)`` from ``phi(s_t)`` and
``a_t``; where it is wrong the agent has not been often, and that error is the reward::

    r_int   = eta / 2 * ||f(phi(s_t), a_t) - phi(s_t+1)||^2          (per transition)
    loss    = (1 - beta) * L_inverse + beta * L_forward               (its own Adam, one step
                                                                       per policy update)

How it composes (``algo.intrinsic = "icm"``): :class:`~rlblocks.algo.BasePolicy` calls
:meth:`Curiosity.prepare` on each sampled batch before ``process_fn``. It hands ``process_fn`` an
:class:`IntrinsicRewardView` of the buffer, whose reads of ``rew`` carry the intrinsic reward, so
GAE (on-policy: the whole rollout) and n-step targets (replay: rows past the sampled one too) see
it without any algorithm knowing; the batch's own ``rew`` is replaced the same way. After the
algorithm's ``learn``, :meth:`Curiosity.finish` takes the module's gradient step on the batch
and adds its losses and the mean intrinsic reward to the update's statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo._optim import OptimizerStep
from rlblocks.algo.nets import MLP, make_encoder, obs_to_tensor
from rlblocks.contracts import Batch, ConfigError

__all__ = ["ICM", "Curiosity", "IntrinsicRewardView", "make_curiosity"]


class ICM(nn.Module):
    """The networks of the intrinsic curiosity module for one pair of spaces.

    ``phi``: observations -> features ``[B, feature_dim]`` (the default encoder of the space,
    then an MLP); ``inverse``: ``[phi(s), phi(s')]`` -> the action (logits for Discrete, the
    action vector for Box); ``forward_model``: ``[phi(s), a]`` -> ``phi(s')`` (Discrete actions
    one-hot).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        feature_dim: int = 64,
        hidden_sizes: list[int] | tuple[int, ...] = (128,),
        images: str = "cnn",
    ) -> None:
        super().__init__()
        if isinstance(action_space, gym.spaces.Discrete):
            self.discrete = True
            self.act_dim = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box):
            self.discrete = False
            self.act_dim = int(np.prod(action_space.shape))
        else:
            raise ConfigError(
                f"algo.intrinsic='icm' predicts Discrete or Box actions, got {action_space}; "
                "leave algo.intrinsic unset for this env"
            )
        hidden = list(hidden_sizes)
        self.body = make_encoder(observation_space, images=images)
        self.phi = MLP(int(self.body.out_dim), hidden, feature_dim, "relu")
        self.inverse = MLP(2 * feature_dim, hidden, self.act_dim, "relu")
        self.forward_model = MLP(feature_dim + self.act_dim, hidden, feature_dim, "relu")

    def features(self, obs: Any) -> torch.Tensor:
        """``phi(obs)``: ``[B, feature_dim]``."""
        return self.phi(self.body(obs))

    def action_input(self, act: torch.Tensor) -> torch.Tensor:
        """Actions as the forward model reads them: one-hot (Discrete) or flat floats (Box)."""
        if self.discrete:
            return F.one_hot(act.long().reshape(-1), self.act_dim).float()
        return act.float().reshape(act.shape[0], -1)

    def errors(
        self, obs: Any, act: torch.Tensor, obs_next: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward model's squared error ``||f(phi(s), a) - phi(s')||^2`` per row ``[B]``
        and the inverse model's loss (a scalar)."""
        phi, phi_next = self.features(obs), self.features(obs_next)
        predicted = self.forward_model(torch.cat([phi, self.action_input(act)], dim=1))
        forward_err = (predicted - phi_next).pow(2).sum(dim=1)
        guess = self.inverse(torch.cat([phi, phi_next], dim=1))
        if self.discrete:
            inverse_loss = F.cross_entropy(guess, act.long().reshape(-1))
        else:
            inverse_loss = F.mse_loss(guess, act.float().reshape(guess.shape))
        return forward_err, inverse_loss


class IntrinsicRewardView:
    """``source`` (a buffer, or a buffer-like view of one) with intrinsic rewards in every read
    of ``rew``: ``keep * extrinsic + r_int`` of the rows read, ``r_int`` from the module's
    forward error; every other read goes through to ``source``."""

    def __init__(self, source: Any, curiosity: Curiosity) -> None:
        self.source = source
        self.curiosity = curiosity

    def __len__(self) -> int:
        return len(self.source)

    def __getattr__(self, name: str) -> Any:
        if name in {"source", "curiosity"}:  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self.source, name)

    def get(self, index: Any, key: str, default: Any = None, stack_num: int | None = None) -> Any:
        """The source's ``get``; for ``rew`` the reward with the intrinsic one added."""
        if key != "rew":
            if stack_num is None:
                return self.source.get(index, key, default)
            return self.source.get(index, key, default, stack_num)
        src = self.source
        return self.curiosity.reward(
            np.asarray(src.get(index, "rew")),
            src.get(index, "obs"),
            src.get(index, "act"),
            src.get(index, "obs_next"),
        )

    def __getitem__(self, index: Any) -> Batch:
        batch = self.source[index]
        batch.rew = self.curiosity.reward(
            np.asarray(batch.rew), batch.obs, batch.act, batch.obs_next
        )
        return batch


class Curiosity:
    """What a policy with ``algo.intrinsic = "icm"`` holds: the :class:`ICM` networks, their
    optimizer and the reward settings. Not a submodule of the policy (the policy's own optimizer
    over all its parameters must not step it); its weights travel in the policy's
    ``extra_state``."""

    def __init__(
        self,
        module: ICM,
        optim_step: OptimizerStep,
        reward_scale: float,
        beta: float,
        keep_extrinsic: bool,
        device: torch.device,
    ) -> None:
        self.module = module
        self.optim_step = optim_step
        self.reward_scale = float(reward_scale)
        self.beta = float(beta)
        self.keep_extrinsic = bool(keep_extrinsic)
        self.device = device
        self._pending: tuple[Any, Any, Any, np.ndarray] | None = None

    def _tensors(self, obs: Any, act: Any, obs_next: Any) -> tuple[Any, torch.Tensor, Any]:
        act_t = torch.as_tensor(np.asarray(act), device=self.device)
        return obs_to_tensor(obs, self.device), act_t, obs_to_tensor(obs_next, self.device)

    @torch.no_grad()
    def intrinsic(self, obs: Any, act: Any, obs_next: Any) -> np.ndarray:
        """``eta / 2 * ||f(phi(s), a) - phi(s')||^2`` of each row, ``[B]`` float32."""
        err, _ = self.module.errors(*self._tensors(obs, act, obs_next))
        return (0.5 * self.reward_scale * err).cpu().numpy().astype(np.float32)

    def reward(self, extrinsic: np.ndarray, obs: Any, act: Any, obs_next: Any) -> np.ndarray:
        """The reward learned from: the env's (when kept) plus the intrinsic one."""
        bonus = self.intrinsic(obs, act, obs_next)
        if extrinsic.ndim > 1:  # one reward per agent: each gets the bonus
            bonus = bonus.reshape(-1, *(1,) * (extrinsic.ndim - 1))
        base = extrinsic.astype(np.float32) if self.keep_extrinsic else 0.0
        return np.asarray(base + bonus, dtype=np.float32)

    def learn(self, obs: Any, act: Any, obs_next: Any) -> dict[str, float]:
        """One gradient step of ``(1 - beta) * inverse + beta * forward`` on the rows."""
        err, inverse_loss = self.module.errors(*self._tensors(obs, act, obs_next))
        forward_loss = 0.5 * err.mean()
        loss = (1.0 - self.beta) * inverse_loss + self.beta * forward_loss
        self.optim_step.step(loss)
        return {
            "icm/loss": float(loss.detach()),
            "icm/loss_inverse": float(inverse_loss.detach()),
            "icm/loss_forward": float(forward_loss.detach()),
        }

    def prepare(self, batch: Batch, source: Any) -> tuple[Batch, IntrinsicRewardView]:
        """Before ``process_fn``: the batch with intrinsic rewards added, and the view of
        ``source`` that adds them to every reward a target reads. The module learns from the
        batch in :meth:`finish`, after the policy's step, so every reward of this update comes
        from the module as it was when the batch came."""
        extrinsic = np.asarray(batch.rew, dtype=np.float32)
        batch.rew = self.reward(extrinsic, batch.obs, batch.act, batch.obs_next)
        bonus = batch.rew - (extrinsic if self.keep_extrinsic else 0.0)
        self._pending = (batch.obs, batch.act, batch.obs_next, bonus)
        return batch, IntrinsicRewardView(source, self)

    def finish(self) -> dict[str, float]:
        """After the policy's step: the module's own gradient step on the batch
        :meth:`prepare` saw, and the statistics of both (``icm/reward``: the mean intrinsic
        reward of the batch, ``icm/loss_inverse``, ``icm/loss_forward``)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return {}
        obs, act, obs_next, bonus = pending
        stats = {
            "icm/reward": float(np.mean(bonus)) if bonus.size else 0.0,
            "icm/reward_max": float(np.max(bonus)) if bonus.size else 0.0,
        }
        stats.update(self.learn(obs, act, obs_next))
        return stats

    def state_dict(self) -> dict[str, Any]:
        """The module's weights (its optimizer is saved with the policy's optimizers)."""
        return self.module.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.module.load_state_dict(state)


def make_curiosity(
    config: Any, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> Curiosity | None:
    """The :class:`Curiosity` that ``config.intrinsic`` asks for (None when it asks for none or
    the config has no such field)."""
    kind = getattr(config, "intrinsic", None)
    if kind is None:
        return None
    if kind != "icm":  # the config's validator names the choices; a config object may not
        raise ConfigError(f"algo.intrinsic={kind!r} is unknown; use 'icm' or leave it unset")
    module = ICM(
        observation_space,
        action_space,
        feature_dim=int(config.icm_feature_dim),
        hidden_sizes=list(config.icm_hidden_sizes),
        images=getattr(config, "images", "cnn"),
    ).to(device)
    step = OptimizerStep(module, float(config.icm_lr))
    return Curiosity(
        module, step, config.icm_reward_scale, config.icm_beta, config.icm_extrinsic, device
    )
