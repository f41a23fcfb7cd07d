"""CrossQ: SAC without target networks, with batch-renormalised networks (Bhatt et al., 2024).

With ``Q_1..Q_n`` the critics (Batch Renormalization after the input and after every hidden
activation), ``pi`` the tanh-squashed Gaussian actor and temperature ``alpha``, one gradient
step on a batch ``(s, a, s')`` is::

    a' ~ pi(.|s')                                        (actor in evaluation mode)
    [Q(s, a); Q(s', a')] = Q([s; s'], [a; a'])           (ONE training-mode pass: the batch
                                                          statistics see both halves)
    V    = min_i Q_i(s', a') - alpha log pi(a'|s')
    y    = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) V
    L_Q  = sum_i mean((Q_i(s, a) - y)^2),   y without gradient (no target network: the
                                             critics' own values at s' bootstrap)
    every policy_delay steps, the actor in training mode and the critics in evaluation mode:
    L_pi = mean(alpha * log pi(a~|s) - min_i Q_i(s, a~))
    L_a  = -mean(log_alpha * (log pi(a~|s) + target_entropy))   (auto_alpha)

Acting always uses the actor in evaluation mode (running statistics), whatever the policy's
mode, so collecting never moves the normalisation statistics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.algo import EntropyTemperature, OffPolicyPolicy, OptimizerStep
from rlblocks.algo.nets import ModuleEnsemble, SquashedGaussianActor, activation_class
from rlblocks.contracts import Batch, Buffer, ConfigError
from rlblocks_algo_crossq.config import CrossQConfig
from rlblocks_algo_crossq.renorm import BatchRenorm1d


def renorm_mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    activation: str,
    batch_norm: bool,
    **renorm: Any,
) -> nn.Sequential:
    """CrossQ's network: ``[BRN] -> (Linear -> activation -> [BRN]) per hidden -> Linear``,
    the Batch Renormalization layers (``renorm`` their arguments) only with ``batch_norm``."""
    act = activation_class(activation)
    layers: list[nn.Module] = [BatchRenorm1d(in_dim, **renorm)] if batch_norm else []
    last = in_dim
    for width in hidden:
        layers += [nn.Linear(last, width), act()]
        if batch_norm:
            layers.append(BatchRenorm1d(width, **renorm))
        last = width
    layers.append(nn.Linear(last, out_dim))
    return nn.Sequential(*layers)


class RenormCritics(nn.Module):
    """``n`` critics over one encoder: ``forward(obs, act)`` gives ``Q(s, a)`` as ``[n, B]``."""

    def __init__(self, encoder: nn.Module, members: Sequence[nn.Module]) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = ModuleEnsemble(members)

    def forward(self, obs: Any, act: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([self.encoder(obs), act], dim=-1)).squeeze(-1)


@contextlib.contextmanager
def module_mode(module: nn.Module, training: bool) -> Iterator[None]:
    """``module`` in training (or evaluation) mode inside, its own mode restored after."""
    before = module.training
    module.train(training)
    try:
        yield
    finally:
        module.train(before)


def _cat(a: Any, b: Any) -> Any:
    """Two batches of observations (tensors, or dicts / tuples of them) stacked along dim 0."""
    if isinstance(a, dict):
        return {k: _cat(a[k], b[k]) for k in a}
    if isinstance(a, (tuple, list)):
        return type(a)(_cat(x, y) for x, y in zip(a, b, strict=True))
    return torch.cat([a, b], dim=0)


class CrossQPolicy(OffPolicyPolicy):
    """CrossQ for Box actions (see :class:`CrossQConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: CrossQConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        config = config or CrossQConfig()
        if getattr(config, "network", "mlp") != "mlp":
            raise ConfigError(
                f"algo.network={config.network!r}: CrossQ's critics and actor are its own "
                "batch-renormalised networks (no target networks), which SimBa's blocks would "
                "replace; leave algo.network at 'mlp' (size them with algo.hidden_sizes), or "
                "train sac or tqc with algo.network=simba"
            )
        super().__init__(
            observation_space,
            action_space,
            config,
            device,
            action_bound_method=config.action_bound_method,
            **nets,
        )
        if not isinstance(action_space, gym.spaces.Box):
            raise TypeError(
                f"CrossQ needs a Box action space, got {action_space}; for Discrete actions "
                "use discrete-sac or dqn"
            )
        c = self.config = config
        self._renorm = dict(
            momentum=c.bn_momentum, r_max=c.r_max, d_max=c.d_max, warmup_steps=c.bn_warmup
        )
        self.actor = self._actor()
        self.critic = self._critics()
        self.temperature = EntropyTemperature(
            c.alpha,
            target_entropy=c.target_entropy if c.target_entropy is not None else -self.act_dim,
            tune=c.auto_alpha,
        )
        self.to(self.device)
        betas = (c.adam_beta1, c.adam_beta2)
        self.actor_step = self.add_optimizer(
            "actor",
            OptimizerStep(self.actor, c.actor_lr, max_grad_norm=c.max_grad_norm, betas=betas),
        )
        self.critic_step = self.add_optimizer(
            "critic",
            OptimizerStep(self.critic, c.critic_lr, max_grad_norm=c.max_grad_norm, betas=betas),
        )
        self.temperature.attach(self, c.alpha_lr, betas=betas)

    def _actor(self) -> SquashedGaussianActor:
        """SAC's actor; its default network has Batch Renormalization (``actor_batch_norm``)."""
        c = self.config
        encoder = self.make_encoder()
        head = self.actor_head(
            int(encoder.out_dim), 2 * self.act_dim,
            "the mean, then the log std, of each action dimension",
        )  # fmt: skip
        if head is None:
            head = renorm_mlp(
                int(encoder.out_dim), self.hidden_sizes_of("actor"), 2 * self.act_dim,
                c.activation, c.actor_batch_norm, **self._renorm,
            )  # fmt: skip
        return SquashedGaussianActor(
            encoder, self.act_dim, log_std_bounds=(c.log_std_min, c.log_std_max), net=head
        )

    def _critics(self) -> RenormCritics:
        """``n_critics`` batch-renormalised MLPs over one encoder, or the user's critic heads."""
        c = self.config
        encoder = self.make_encoder()
        in_dim = int(encoder.out_dim) + self.act_dim
        heads = self.critic_heads(
            c.n_critics, in_dim, 1, "Q(s, a) of the features and the action concatenated"
        )
        if heads is None:
            heads = [
                renorm_mlp(in_dim, self.hidden_sizes_of("critic"), 1, c.activation,
                           c.batch_norm, **self._renorm)
                for _ in range(c.n_critics)
            ]  # fmt: skip
        return RenormCritics(encoder, heads)

    @property
    def alpha(self) -> torch.Tensor:
        """The current temperature (a 0-d tensor, no gradient)."""
        return self.temperature.alpha

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Sampled actions ``[B, act_dim]`` in [-1, 1] (the mean action when testing with
        ``deterministic_eval``), from the actor in evaluation mode."""
        greedy = not self.training and self.config.deterministic_eval
        with torch.no_grad(), module_mode(self.actor, False):
            act, _ = self.actor(
                self.obs_tensor(batch.obs), deterministic=greedy, with_log_prob=False
            )
        return Batch(act=act.cpu().numpy(), state=state)

    # -- learning -----------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        """``min_i Q_i(s', a') - alpha log pi(a'|s')`` with the critics and the actor in
        evaluation mode. Not used by :meth:`learn`, which gets ``Q(s', a')`` from the joint
        training-mode pass; kept for inspection and for code that asks any off-policy policy."""
        with module_mode(self.actor, False), module_mode(self.critic, False):
            act_next, logp_next = self.actor(obs_next)
            q_next = self.critic(obs_next, act_next).min(dim=0).values
        return q_next - self.alpha * logp_next

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """Keep the host's share of the n-step target (partial return, discount, the bootstrap
        observations): :meth:`learn` finishes it in the joint pass through the critics."""
        partial, discount, obs_next = self.target_parts(batch, buffer, indices)
        batch.target_partial = self.as_tensor(partial)
        batch.target_discount = self.as_tensor(discount)
        batch.target_obs = self.obs_tensor(obs_next)
        return batch

    def graph_phase(self) -> bool:
        """Whether the next gradient step is also an actor step (see ``learn``)."""
        return (self.gradient_steps + 1) % self.config.policy_delay == 0

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        obs = self.obs_tensor(batch.obs)
        act = self.as_tensor(batch.act)
        obs_next = batch.target_obs
        weight = self.weights(batch)
        size = act.shape[0]

        # critics: one training-mode pass over [s; s'] and [a; a'], so Batch Renormalization
        # normalises both halves with the same statistics
        with torch.no_grad(), module_mode(self.actor, False):
            act_next, logp_next = self.actor(obs_next)
        with module_mode(self.critic, True):
            q_all = self.critic(_cat(obs, obs_next), torch.cat([act, act_next], dim=0))
        q, q_next = q_all[:, :size], q_all[:, size:].detach()
        with torch.no_grad():
            value = q_next.min(dim=0).values - self.alpha * logp_next
            target = batch.target_partial + batch.target_discount * value
        td = q - target  # [n, B]
        sq = td.pow(2) if weight is None else td.pow(2) * weight
        critic_loss = sq.mean(dim=1).sum()
        self.critic_step.step(critic_loss)
        self.gradient_steps += 1

        stats: dict[str, Any] = {"loss/critic": critic_loss.detach(), "q": q.detach().mean()}
        if self.gradient_steps % self.config.policy_delay == 0:
            # actor (training mode) against the critics' running statistics (evaluation mode)
            with (
                self.critic_step.frozen(),
                module_mode(self.critic, False),
                module_mode(self.actor, True),
            ):
                act_new, logp = self.actor(obs)
                q_new = self.critic(obs, act_new).min(dim=0).values
                actor_loss = (self.alpha * logp - q_new).mean()
                self.actor_step.step(actor_loss)
            stats["loss/actor"] = actor_loss.detach()
            stats["entropy"] = -logp.detach().mean()
            if self.temperature.tune:
                self.temperature.update(-logp.detach())
                stats["alpha"] = self.alpha

        batch.td_error = td.detach().abs().mean(dim=0)
        return stats
