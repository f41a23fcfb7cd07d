"""The part REINFORCE, A2C, PPO, NPG and TRPO share: acting from an actor, preparing a rollout
once per update (features, old log-probabilities, GAE advantages and value targets as tensors),
and iterating shuffled minibatches over it.

Data path of one update (``policy.update(0, buffer, batch_size=..., repeat=...)``)::

    buffer (all of it, time order) -> process_fn:
        obs, obs_next -> encoder -> [obs_rms] -> features [N, D]
        critic(features), critic(features_next) -> episodic_returns (GAE, partial episodes) ->
        adv [N], returns [N]; actor(features).log_prob(act) -> logp_old [N]
    -> learn: for each repeat, for each minibatch of shuffled row indices: the algorithm's loss

Everything ``learn`` touches is a tensor prepared once; a minibatch is ``tensor[idx]`` per field.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.algo._distributions import Distribution
from rlblocks.algo._masks import mask_distribution, observation_mask
from rlblocks.algo._normalize import RunningMeanStd
from rlblocks.algo._onpolicy_config import OnPolicyConfig
from rlblocks.algo._optim import OptimizerStep
from rlblocks.algo._policy import BasePolicy
from rlblocks.algo._returns import episodic_returns
from rlblocks.algo._schedules import linear_decay
from rlblocks.algo.nets import (
    Actor,
    Critic,
    NetworkPart,
    SimbaMLP,
    build_part,
    check_output,
    encoder_part,
    make_encoder,
    network_body,
    obs_to_tensor,
    part_device,
)
from rlblocks.contracts import Batch, Buffer, ConfigError, has_action_mask, presence_key

__all__ = ["OnPolicyPolicy", "Rollout", "value_loss"]

Rollout = dict[str, torch.Tensor]
"""A prepared update: ``obs`` (features ``[N, D]``), ``obs_next``, ``act``, ``logp_old``,
``value_old``, ``adv``, ``returns``, ``mask`` (the legal actions ``[N, A]``, when the
observations carry an action mask), and the policy's training views under their own names
(all length N)."""
_ROLLOUT_FIELDS = ("obs", "obs_next", "act", "logp_old", "value_old", "adv", "returns", "mask")


class OnPolicyPolicy(BasePolicy):
    """Base of the on-policy algorithms. Subclasses implement :meth:`learn` (the loss).

    Args:
        encoder: your observation encoder, a module or a factory ``(observation_space,
            action_space) -> module`` (:data:`~rlblocks.algo.nets.NetworkPart`), mapping the
            observation (a tensor, or a dict of tensors for Dict spaces) to features ``[B, D]``;
            default :func:`~rlblocks.algo.nets.make_encoder` (a CNN for image Boxes unless
            ``images="flatten"``, flattened or one-hot parts otherwise). With a learnable
            encoder, features are recomputed in every minibatch.
        actor: your actor head, features ``[B, D]`` -> a
            :class:`~rlblocks.algo.Distribution`, or the numbers one is made of (logits ``[B,
            n]`` for Discrete, concatenated logits for MultiDiscrete, the mean ``[B, act_dim]``
            for Box, with a learned state-independent log std); default
            :class:`~rlblocks.algo.nets.Actor` with ``actor_hidden_sizes``.
        critic: your critic head, features -> ``[B, 1]`` or ``[B]``; default
            :class:`~rlblocks.algo.nets.Critic` with ``critic_hidden_sizes``.
        use_critic: False for algorithms without a value function (REINFORCE).

    Each part given is checked once here on a sample of the spaces; one that returns
    ``(output, state)`` (the thesis' style) is wrapped in :class:`~rlblocks.algo.nets.TupleOutput`.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: OnPolicyConfig,
        device: str | torch.device = "cpu",
        encoder: NetworkPart | None = None,
        actor: NetworkPart | None = None,
        critic: NetworkPart | None = None,
        use_critic: bool = True,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            device=device,
            action_scaling=config.action_scaling,
            action_bound_method=config.action_bound_method,
        )
        self.config = config
        c = config
        if critic is not None and not use_critic:
            raise ConfigError(
                f"{type(self).__name__} learns without a critic, so it takes no critic; leave "
                "it out (or use an actor-critic algorithm such as a2c or ppo)"
            )
        self.note_networks(encoder=encoder, actor=actor, critic=critic)
        if encoder is not None:
            built = build_part("encoder", encoder, observation_space, action_space)
            self.encoder = encoder_part(built, observation_space)
        else:
            self.encoder = make_encoder(observation_space, images=c.images)
        feat_dim = int(self.encoder.out_dim)
        self.learn_encoder = any(p.requires_grad for p in self.encoder.parameters())
        if self.learn_encoder and c.obs_norm:
            raise ConfigError(
                "obs_norm normalises fixed features; set obs_norm=false with a learnable encoder "
                "(image observations get a CNN unless images='flatten')"
            )
        # SimBa's running-statistics normalisation is this one (no second normaliser); a
        # learning encoder (an image CNN) is left unnormalised, as with SimbaEncoder
        simba = getattr(c, "network", "mlp") == "simba" and not self.learn_encoder
        self.obs_rms = RunningMeanStd((feat_dim,)) if c.obs_norm or simba else None
        self.ret_rms = RunningMeanStd((), clip=None) if c.value_scaling else None
        self.actor, self.critic = self.build_heads(actor, critic, feat_dim, use_critic)
        if getattr(c, "network", "mlp") == "simba" and actor is None and not any(
            isinstance(m, SimbaMLP) for m in self.modules()
        ):
            raise ConfigError(
                f"{type(self).__name__} builds its actor by its own code and has no SimBa "
                "option yet; set algo.network='mlp'"
            )
        self.to(self.device)
        self._continuous = isinstance(action_space, gym.spaces.Box)
        self._act_dtype = torch.float32 if self._continuous else torch.long
        self._buffer: Buffer | None = None
        self._indices: np.ndarray | None = None
        #: observations carry an action mask (obs["action_mask"]): acting samples legal
        #: actions only and the losses use masked distributions (rollouts carry ``"mask"``)
        self.masked = has_action_mask(observation_space)
        self.enable_intrinsic(config)

    def actor_input_dim(self, feature_dim: int) -> int:
        """Width of what the actor reads: the encoder's features (a recurrent policy's memory
        output instead)."""
        return feature_dim

    def critic_input_dim(self, feature_dim: int) -> int:
        """Width of what the critic reads: the encoder's features (a centralised critic reads
        the global state too)."""
        return feature_dim

    def build_heads(
        self,
        actor: NetworkPart | None,
        critic: NetworkPart | None,
        feature_dim: int,
        use_critic: bool = True,
    ) -> tuple[nn.Module, nn.Module | None]:
        """The actor and (with ``use_critic``) the critic: the user's heads, checked, or the
        default ones; the actor is built first (the order decides a seed's initial weights)."""
        actor_net = self.make_actor(actor, self.actor_input_dim(feature_dim))
        if not use_critic:
            return actor_net, None
        return actor_net, self.make_critic(critic, self.critic_input_dim(feature_dim))

    def make_actor(self, given: NetworkPart | None, in_dim: int) -> nn.Module:
        """The actor over inputs of width ``in_dim``: the user's head ``given`` (checked on a
        sample, wrapped into a distribution when it returns numbers) or the default
        :class:`~rlblocks.algo.nets.Actor`."""
        c, space = self.config, self.action_space
        hidden = list(c.actor_hidden_sizes if c.actor_hidden_sizes is not None else c.hidden_sizes)
        if given is None:
            if getattr(c, "network", "mlp") != "mlp":
                body = network_body(c, "actor", in_dim, Actor.out_dim(space), hidden)
                return Actor(in_dim, space, log_std_init=c.log_std_init, net=body)
            return Actor(in_dim, space, hidden, c.activation, c.log_std_init, c.ortho_init)
        net = build_part("actor", given, self.observation_space, space)
        out = Actor.out_dim(space)
        what = "a Distribution, or " + (
            f"the mean of each of the {out} action dimensions"
            if isinstance(space, gym.spaces.Box) else f"{out} logits"
        )
        net, sample = check_output(
            "actor", net, [torch.zeros(2, in_dim, device=part_device(net))], [(out,)], what,
            distribution_ok=True,
        )  # fmt: skip
        if isinstance(sample, Distribution):
            return net
        return Actor(in_dim, space, log_std_init=c.log_std_init, net=net)

    def make_critic(self, given: NetworkPart | None, in_dim: int) -> nn.Module:
        """The critic over inputs of width ``in_dim``: the user's head ``given`` (checked on a
        sample) or the default :class:`~rlblocks.algo.nets.Critic`."""
        c = self.config
        if given is None:
            hidden = c.critic_hidden_sizes if c.critic_hidden_sizes is not None else c.hidden_sizes
            if getattr(c, "network", "mlp") != "mlp":
                return Critic(in_dim, net=network_body(c, "critic", in_dim, 1, hidden))
            return Critic(in_dim, list(hidden), c.activation, c.ortho_init)
        net = build_part("critic", given, self.observation_space, self.action_space)
        net, value = check_output(
            "critic", net, [torch.zeros(2, in_dim, device=part_device(net))], [(1,), ()],
            "the state value V(s)",
        )  # fmt: skip
        return Critic(in_dim, net=net, squeeze=value.dim() == 2)

    # -- features and acting ------------------------------------------------------------------
    def encode(self, obs: Any) -> torch.Tensor:
        """Raw observations (arrays or dicts of arrays) -> features ``[B, D]`` (normalised)."""
        feats = self.encoder(obs_to_tensor(obs, self.device))
        if self.obs_rms is not None:
            feats = self.obs_rms.normalize(feats)
        return feats

    def dist(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> Distribution:
        """The action distribution at ``features``, restricted to the legal actions of an
        action ``mask [B, A]`` (a rollout's ``"mask"``) when there is one."""
        return mask_distribution(self.actor(features), mask)

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """Sample actions (``act [B]`` or ``[B, act_dim]``, network units); the mode when
        testing with ``deterministic_eval``. Only legal actions under an action mask."""
        obs = obs_to_tensor(batch.obs, self.device)
        mask = observation_mask(obs) if self.masked else None
        dist = self.dist(self.encode(obs), mask)
        greedy = not self.training and self.config.deterministic_eval
        act = dist.mode() if greedy else dist.sample()
        return Batch(act=act.detach().cpu().numpy(), state=state)

    def make_optimizer_step(
        self, params: Any, optimizer: str = "adam", **kwargs: Any
    ) -> OptimizerStep:
        """An optimizer step over ``params`` with the config's learning rate, its linear decay
        (``lr_decay_steps``) and gradient clipping (``max_grad_norm``)."""
        c = self.config
        schedule = None
        if c.lr_decay_steps:
            lr, decay = c.lr, c.lr_decay_steps
            schedule = lambda env_step: linear_decay(lr, env_step, decay)  # noqa: E731
        return OptimizerStep(
            params, c.lr, optimizer=optimizer, max_grad_norm=c.max_grad_norm,
            lr_schedule=schedule, **kwargs,
        )  # fmt: skip

    # -- preparing an update --------------------------------------------------------------------
    def prepare_inputs(self, obs: Any) -> Any:
        """What minibatches hold for ``obs``: fixed features, or raw tensors when the encoder
        learns."""
        if self.learn_encoder:
            return obs_to_tensor(obs, self.device)
        with torch.no_grad():
            return self.encode(obs)

    def features(self, inputs: Any) -> torch.Tensor:
        """Features of minibatch ``inputs`` (see :meth:`prepare_inputs`)."""
        return self.encode(inputs) if self.learn_encoder else inputs

    @torch.no_grad()
    def values(self, inputs: Any) -> torch.Tensor:
        """Critic output (in the critic's scaled units) for prepared inputs."""
        assert self.critic is not None
        return self.critic(self.features(inputs))

    def critic_value(
        self, data: Rollout, features: torch.Tensor | None = None, next_obs: bool = False
    ) -> torch.Tensor:
        """V of rollout rows ``data`` (or of their next observations), from the observation
        ``features`` when the caller has them. A centralised critic (MAPPO's) overrides this to
        read what else the rollout holds (see :meth:`rollout_extras`)."""
        assert self.critic is not None
        if features is None:
            features = self.features(data["obs_next" if next_obs else "obs"])
        return self.critic(features)

    def rollout_extras(self, batch: Batch) -> Rollout:
        """Tensors besides observations and actions that minibatches should carry (none here;
        e.g. the global state of a multi-agent env for a centralised critic)."""
        return {}

    def process_fn(self, batch: Batch, buffer: Buffer, indices: np.ndarray) -> Batch:
        """Prepare the rollout once: features, ``logp_old``, advantages and returns (GAE with
        partial-episode bootstrapping), all as tensors in ``batch``."""
        if self.obs_rms is not None and self.training:
            with torch.no_grad():
                self.obs_rms.update(self.encoder(obs_to_tensor(batch.obs, self.device)))
        self._buffer, self._indices = buffer, np.asarray(indices)
        obs = self.prepare_inputs(batch.obs)
        data: Rollout = {
            "obs": obs,
            "act": torch.as_tensor(
                np.asarray(batch.act), dtype=self._act_dtype, device=self.device
            ),
        }
        if self.critic is not None:
            data["obs_next"] = self.prepare_inputs(batch.obs_next)
        if self.masked:
            data["mask"] = observation_mask(obs_to_tensor(batch.obs, self.device))
        data.update(self._view_tensors(batch))
        data.update(self.rollout_extras(batch))
        with torch.no_grad():
            dist = self.dist(self.features(obs), data.get("mask"))
            data["logp_old"] = dist.log_prob(data["act"])
        self.compute_advantages(data, update_stats=True)
        return Batch(data)

    def _view_tensors(self, batch: Batch) -> Rollout:
        """The training views ``update`` put in ``batch`` (see ``view_requirements``), as
        tensors that minibatches carry, so ``learn`` sees the views the policy acted on."""
        out: Rollout = {}
        for name, req in self.view_requirements.items():
            if not req.used_for_training or req.plain(name) or name not in batch:
                continue
            if name in _ROLLOUT_FIELDS:
                raise ConfigError(
                    f"view {name!r} has the name of a rollout field "
                    f"({', '.join(_ROLLOUT_FIELDS)}); rename the view"
                )
            out[name] = _tensor_tree(batch[name], self.device)
            if req.agents is not None:  # other agents' views come with their presence mask
                out[presence_key(name)] = _tensor_tree(batch[presence_key(name)], self.device)
        return out

    def compute_advantages(self, data: Rollout, update_stats: bool = False) -> None:
        """Fill ``adv``, ``returns`` (critic targets, scaled) and ``value_old`` in ``data``."""
        c = self.config
        assert self._buffer is not None and self._indices is not None
        if self.critic is None:
            # Monte-Carlo reward-to-go (GAE with V = 0 and lambda = 1): without a critic nothing
            # can be bootstrapped, so pieces cut by a time limit or a collect count their unseen
            # future as zero; collect whole episodes (episode_per_collect) to avoid the bias
            zeros = np.zeros(len(self._indices))
            ret, _ = episodic_returns(self._buffer, self._indices, zeros, zeros, c.gamma, 1.0)
            ret_t = torch.as_tensor(ret, dtype=torch.float32, device=self.device)
            data["returns"] = data["adv"] = ret_t
            return
        with torch.no_grad():
            v = self.critic_value(data)
            v_next = self.critic_value(data, next_obs=True)
        scale = float(self.ret_rms.std) if self.ret_rms is not None else 1.0
        returns, adv = episodic_returns(
            self._buffer,
            self._indices,
            v.cpu().numpy() * scale,
            v_next.cpu().numpy() * scale,
            c.gamma,
            c.gae_lambda,
        )
        if self.ret_rms is not None:
            if update_stats:
                self.ret_rms.update(returns)
            returns = returns / float(self.ret_rms.std)
        data["value_old"] = v
        data["returns"] = torch.as_tensor(returns, dtype=torch.float32, device=self.device)
        data["adv"] = torch.as_tensor(adv, dtype=torch.float32, device=self.device)

    # -- iterating ------------------------------------------------------------------------------
    def minibatches(self, data: Rollout, batch_size: int) -> Iterator[Rollout]:
        """One shuffled pass over ``data`` in minibatches of ``batch_size`` rows (the last one
        may be smaller; ``batch_size <= 0`` means the whole rollout at once)."""
        n = len(data["act"])
        if batch_size <= 0 or batch_size >= n:
            yield data
            return
        perm = torch.randperm(n, device=self.device)
        for idx in perm.split(batch_size):
            yield {k: _take(v, idx) for k, v in data.items()}

    @staticmethod
    def normalized(adv: torch.Tensor) -> torch.Tensor:
        """Advantages standardised to zero mean and unit std (unchanged for a single row)."""
        if adv.numel() < 2:
            return adv
        return (adv - adv.mean()) / (adv.std() + 1e-8)

    def rollout(self, batch: Batch) -> Rollout:
        """The tensors :meth:`process_fn` prepared, as a plain dict (fast to index)."""
        return {k: batch[k] for k in batch.keys()}  # noqa: SIM118

    def update(self, sample_size: int, buffer: Buffer | None, **kwargs: Any) -> dict[str, float]:
        try:
            return super().update(sample_size, buffer, **kwargs)
        finally:
            self._buffer = self._indices = None


def _take(x: Any, idx: torch.Tensor) -> Any:
    if isinstance(x, torch.Tensor):
        return x[idx]
    return {k: _take(x[k], idx) for k in x.keys()}  # noqa: SIM118 (dicts and Batches)


def _tensor_tree(x: Any, device: torch.device) -> Any:
    """An array (or a Batch / dict of them) as tensors on ``device``, dtypes kept."""
    if isinstance(x, Batch | dict):
        return {k: _tensor_tree(x[k], device) for k in x.keys()}  # noqa: SIM118
    return torch.as_tensor(np.asarray(x), device=device)


def value_loss(
    value: torch.Tensor, ret: torch.Tensor, value_old: torch.Tensor | None = None, clip: float = 0.2
) -> torch.Tensor:
    """Mean squared error of ``value`` against the targets ``ret``; with ``value_old`` (the values
    when the data was collected), PPO's clipped version: the larger of the plain error and the
    error of ``value`` kept within ``clip`` of ``value_old``."""
    err = (value - ret).pow(2)
    if value_old is None:
        return err.mean()
    clipped = value_old + (value - value_old).clamp(-clip, clip)
    return torch.max(err, (clipped - ret).pow(2)).mean()
