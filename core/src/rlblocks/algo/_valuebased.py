"""What the Q-learning family shares (C51, Rainbow, QR-DQN, IQN, FQF): greedy acting on the
network's expected Q-values, epsilon-greedy or noisy-net exploration, a target network, one
optimizer, and n-step targets in pieces for algorithms that bootstrap a whole distribution.

An algorithm subclasses :class:`ValueBasedPolicy` and writes :meth:`~ValueBasedPolicy.q_values`
(expected Q ``[B, A]`` from its network, for acting and for the double-Q action choice) and
``learn`` (its loss on ``batch.obs``, ``batch.act`` and the target pieces). Data path of one
gradient step::

    buffer.sample -> process_fn: batch.partial [B], batch.discount [B] (gamma^m, 0 if the
                                 episode terminated), batch.obs_boot (the bootstrap observations)
                  -> learn:      target distribution = partial + discount * Z_target(obs_boot, a*)
                  -> post_process_fn: batch.td_error to a prioritized sampler
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.algo._masks import masked_argmax, masked_epsilon_greedy, observation_mask
from rlblocks.algo._offpolicy import OffPolicyPolicy
from rlblocks.algo._optim import OptimizerStep
from rlblocks.algo._returns import nstep_return
from rlblocks.algo._target import TargetNetwork
from rlblocks.algo.nets import (
    NetworkPart,
    build_part,
    check_output,
    encoder_part,
    make_encoder,
    part_device,
    reset_noise,
    sample_observations,
    simba_encoder,
)
from rlblocks.contracts import Batch, Buffer, has_action_mask

__all__ = ["QLearningPolicy", "ValueBasedPolicy", "epsilon_greedy", "value_network"]


def value_network(
    observation_space: gym.Space,
    action_space: gym.Space,
    default: Callable[[nn.Module], nn.Module],
    shape: tuple[int, ...],
    what: str,
    images: str = "cnn",
    encoder: NetworkPart | None = None,
    model: NetworkPart | None = None,
    network: str = "mlp",
) -> nn.Module:
    """The network of a value-based algorithm.

    Without ``model``: ``default(encoder)`` over the user's ``encoder`` (checked to return
    features ``[B, D]``, with ``out_dim``) or the default one of the observation space. With
    ``model`` (a module or a factory of the spaces): the user's network over observation
    tensors, or over the encoder's features when an ``encoder`` is given too, checked once
    to return ``[B, *shape]`` (``what`` says what that is) and wrapped when it answers
    ``(output, state)`` in the thesis' style. ``network="simba"`` puts the default encoder's
    flat features through running-statistics normalisation
    (:class:`~rlblocks.algo.nets.SimbaEncoder`).
    """
    enc = None
    if encoder is not None:
        built = build_part("encoder", encoder, observation_space, action_space)
        enc = encoder_part(built, observation_space)
    if model is None:
        if enc is None:
            enc = make_encoder(observation_space, images=images)
            if network == "simba":  # running-statistics normalisation of flat observations
                enc = simba_encoder(enc)
        return default(enc)
    net = build_part("model", model, observation_space, action_space)
    if enc is not None:
        sample = torch.zeros(2, int(enc.out_dim), device=part_device(net))
        net = check_output("model", net, [sample], [shape], f"{what}, from the features")[0]
        return nn.Sequential(enc, net)
    sample = sample_observations(observation_space, part_device(net))
    return check_output("model", net, [sample], [shape], what)[0]


def epsilon_greedy(
    act: np.ndarray, eps: float, num_actions: int, start: int, rng: np.random.Generator
) -> np.ndarray:
    """Replace each action by a uniformly random one (``start .. start + num_actions - 1``)
    with probability ``eps``.

    One uniform draw ``u`` per row decides both: ``pick = floor(u * A / eps)`` is below the
    number of actions ``A`` exactly when ``u < eps`` (up to rounding), and is then uniform over
    the actions, since ``u / eps`` is uniform on [0, 1) there: one generator call and a few
    whole-array operations per env step. (An epsilon below 1e-300 never explores.)"""
    if eps <= 1e-300:
        return act
    scale = num_actions / eps
    scaled = rng.random(len(act))
    scaled *= scale
    if scale >= 2.0**62:  # rows that do not explore could leave the int64 range
        np.minimum(scaled, num_actions, out=scaled)
    pick = scaled.astype(np.int64)
    explore = pick < num_actions
    if not np.count_nonzero(explore):
        return act
    if start:
        pick += start
    out = act.copy()
    np.copyto(out, pick, where=explore, casting="unsafe")
    return out


class QLearningPolicy(OffPolicyPolicy):
    """What every Q-learning policy has, whatever its action space: the network ``model``, its
    target network, the optimizer ``"q"``, the epsilon schedule and the end of a gradient step
    (:meth:`finish_step`). ``config`` is a
    :class:`~rlblocks.algo.ValueBasedConfig` (or has its fields)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any,
        device: str | torch.device,
        model: nn.Module,
        action_scaling: bool = True,
    ) -> None:
        super().__init__(observation_space, action_space, config, device,
                         action_scaling=action_scaling)  # fmt: skip
        c = config
        self.model = model.to(self.device)
        self.use_target = c.tau is not None or c.target_update_interval > 0
        self.target = (
            TargetNetwork(self.model, tau=c.tau, hard_update_interval=c.target_update_interval)
            if self.use_target
            else None
        )
        self.optim_step = self.add_optimizer(
            "q",
            OptimizerStep(self.model, c.lr, max_grad_norm=c.max_grad_norm, eps=c.adam_eps),
        )

    @property
    def target_model(self) -> nn.Module:
        """The network that values bootstrap targets (the online one without a target)."""
        return self.target.net if self.target is not None else self.model

    @property
    def epsilon(self) -> float:
        """Exploration rate now: the schedule while collecting for training, ``eps_test`` while
        testing."""
        c = self.config
        if not self.training:
            return c.eps_test
        if c.eps_decay_steps == 0:
            return c.eps_end
        frac = min(1.0, self.env_step / c.eps_decay_steps)
        return c.eps_start + frac * (c.eps_end - c.eps_start)

    def schedule_stats(self) -> dict[str, float]:
        return {**super().schedule_stats(), "epsilon": self.epsilon}

    def test_exploration(self, act: np.ndarray, out: Batch) -> np.ndarray:
        """``act`` as a test plays it: in test mode (``policy.eval()``) ``eps_test`` of the
        actions are random (Tianshou's tests set it through ``test_fn``), so the trainer's
        tests, ``agent.evaluate`` and ``agent.act`` all use it; in training mode unchanged
        (the collector adds :meth:`exploration_noise`)."""
        if self.training or not self.config.eps_test:
            return act
        return self.exploration_noise(act, out)

    def finish_step(self, loss: torch.Tensor) -> None:
        """Apply one gradient step of ``loss``, move the target network, draw new noise."""
        self.optim_step.step(loss)
        self.gradient_steps += 1
        if self.target is not None:
            self.target.update()
        if self.config.noisy:
            reset_noise(self.model)


class ValueBasedPolicy(QLearningPolicy):
    """Base of the distributional Q-learning algorithms over Discrete actions.

    The subclass builds ``model`` (its network) and passes it here; it writes
    :meth:`q_values` and ``learn``."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any,
        device: str | torch.device,
        model: nn.Module,
    ) -> None:
        if not isinstance(action_space, gym.spaces.Discrete):
            raise TypeError(
                f"{type(self).__name__} needs a Discrete action space, got {action_space}; for "
                "continuous actions use an actor-critic algorithm (or bdq over discretised ones)"
            )
        super().__init__(observation_space, action_space, config, device, model)
        self.num_actions = int(action_space.n)
        #: observations carry an action mask: acting, exploration and targets honour it
        self.masked = has_action_mask(observation_space)

    # -- acting -------------------------------------------------------------------------------
    def q_values(self, obs: Any, net: nn.Module) -> torch.Tensor:
        """Expected Q-values ``[B, A]`` of observation tensors under ``net`` (the online or the
        target network)."""
        raise NotImplementedError

    def forward(
        self, batch: Batch, state: Any = None, model: str = "model", **kwargs: Any
    ) -> Batch:
        """Greedy actions (``eps_test`` of them random in test mode): ``Batch(act [B],
        logits=expected q [B, A])``, as indices from 0 (``map_action`` adds the space's
        ``start``)."""
        net = self.target_model if model != "model" else self.model
        obs = self.obs_tensor(batch.obs)
        q = self.q_values(obs, net)
        mask = observation_mask(obs) if self.masked else None
        act = masked_argmax(q.detach(), mask).cpu().numpy()
        out = Batch(act=act, logits=q, state=state)
        if mask is not None:  # for exploration among the legal actions
            out.mask = mask
        out.act = self.test_exploration(act, out)  # unchanged in training mode
        return out

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        """Epsilon-greedy; among the legal actions of ``batch.mask`` when the observations
        carry an action mask."""
        mask = batch.get("mask", None) if self.masked else None
        if mask is not None:
            return masked_epsilon_greedy(act, self.epsilon, mask, self._rng)
        return epsilon_greedy(act, self.epsilon, self.num_actions, 0, self._rng)

    # -- learning -----------------------------------------------------------------------------
    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """The n-step target in pieces: ``batch.partial`` and ``batch.discount`` (tensors
        ``[B]``) and ``batch.obs_boot`` (the observations to bootstrap from)."""
        c = self.config
        if c.n_step == 1:
            partial = np.asarray(batch.rew, dtype=np.float32)
            discount = np.where(np.asarray(batch.terminated, dtype=bool), 0.0, c.gamma)
            obs_boot = batch.obs_next
        else:
            partial, boot_idx, discount = nstep_return(
            buffer,
            indices,
            c.gamma,
            c.n_step,
            rebuilds_obs_next=self.buffer_abilities(buffer).rebuilds_obs_next,
        )
            obs_boot = buffer.get(boot_idx, "obs_next")
        batch.partial = self.as_tensor(partial)
        batch.discount = self.as_tensor(discount)
        batch.obs_boot = obs_boot
        return batch

    def bootstrap_actions(self, obs_boot: torch.Tensor) -> torch.Tensor:
        """``a*`` ``[B]``: the online network's greedy action with ``double`` (and a target
        network), else the target network's; the best legal one under an action mask."""
        net = self.model if self.config.double and self.use_target else self.target_model
        mask = observation_mask(obs_boot) if self.masked else None
        with torch.no_grad():
            return masked_argmax(self.q_values(obs_boot, net), mask)

    def actions_tensor(self, batch: Batch) -> torch.Tensor:
        """The stored actions as indices ``[B]`` from 0 (what the buffer holds: network
        indices, see :meth:`~rlblocks.algo.BasePolicy.map_action`)."""
        return torch.as_tensor(batch.act, dtype=torch.long, device=self.device)

