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
from torch import nn

from rlblocks.algo._cuda_graph import StepGraph, graph_refusal
from rlblocks.algo._policy import BasePolicy
from rlblocks.algo._returns import nstep_return
from rlblocks.algo._target import TargetNetwork
from rlblocks.algo.nets import (
    CategoricalActor,
    DeterministicActor,
    GaussianActor,
    NetworkPart,
    QEnsemble,
    SimbaEncoder,
    SimbaMLP,
    SquashedGaussianActor,
    build_part,
    check_output,
    encoder_part,
    fresh_copy,
    make_encoder,
    network_body,
    obs_to_tensor,
    part_device,
    simba_encoder,
)
from rlblocks.contracts import Batch, Buffer, ConfigError

__all__ = ["OffPolicyPolicy"]


def _simba_encoders(policy: nn.Module) -> list[SimbaEncoder]:
    """The SimBa encoders of ``policy``'s online networks (not of target networks, whose copies
    follow the online ones at each target update)."""
    inside_targets = {
        id(m) for t in policy.modules() if isinstance(t, TargetNetwork) for m in t.modules()
    }
    return [
        m for m in policy.modules() if isinstance(m, SimbaEncoder) and id(m) not in inside_targets
    ]


def _check_simba_built(policy: nn.Module) -> None:
    """Refuse ``network="simba"`` where the algorithm built its networks by its own code (no
    SimBa part in them), rather than train plain MLPs under a SimBa label."""
    if not any(isinstance(m, SimbaMLP | SimbaEncoder) for m in policy.modules()):
        raise ConfigError(
            f"algo.network='simba' left no SimBa part in {type(policy).__name__}'s networks "
            "(the algorithm builds them by its own code, or all are your own); set "
            "algo.network='mlp' (SimBa networks: sac, td3, ddpg, redq, dqn, ppo, a2c, ...)"
        )


def _observe_collected(policy: OffPolicyPolicy, args: tuple[Any, ...]) -> None:
    """Before acting: a training collect (training, not updating) merges the observations it
    acts on into the running statistics; tests and gradient steps leave them as they are."""
    if policy.training and not policy.updating and args and hasattr(args[0], "obs"):
        policy.observe(args[0].obs)


class OffPolicyPolicy(BasePolicy):
    """Base of the replay-based algorithms. ``config`` must have ``gamma`` and ``n_step``.

    Subclasses register each optimizer with :meth:`~rlblocks.algo.BasePolicy.add_optimizer`
    (checkpointed and told the env step by name) and implement :meth:`target_value` and
    :meth:`learn`.

    ``encoder``, ``actor`` and ``critic`` are a user's own networks (modules or factories of
    the spaces, :data:`~rlblocks.algo.nets.NetworkPart`), which an actor-critic algorithm
    builds through :meth:`make_encoder`, :meth:`actor_head` and :meth:`critic_heads`: the
    encoder maps observations to features ``[B, D]`` (each network gets its own: a module
    given once is copied, with fresh parameters, for the next), the heads read those features
    (a critic of continuous actions reads ``[features, action]``).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: Any,
        device: str | torch.device = "cpu",
        action_scaling: bool = True,
        action_bound_method: str = "clip",
        encoder: NetworkPart | None = None,
        actor: NetworkPart | None = None,
        critic: NetworkPart | None = None,
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
        self.note_networks(encoder=encoder, actor=actor, critic=critic)
        # kept in a plain dict (not registered as submodules): each is built into the networks
        # that use it; ``uses`` counts how many got a given module (the later ones get copies)
        self._given: dict[str, Any] = {"encoder": encoder, "actor": actor, "critic": critic}
        self._uses: dict[str, int] = {}
        self.enable_intrinsic(config)
        #: the running-statistics normalisers of SimBa encoders, found at the first call
        self._observers: list[SimbaEncoder] | None = None
        if self.network == "simba":  # other policies keep nn.Module's hook-free fast call
            self.register_forward_pre_hook(_observe_collected)

    # -- building blocks ----------------------------------------------------------------------
    def make_encoder(self) -> nn.Module:
        """A fresh encoder of this policy's observation space, with ``out_dim``: the user's
        (checked on a sample of the space), else the default one (``config.images`` decides
        whether image Boxes go through a CNN)."""
        given = self._given["encoder"]
        if given is None:
            encoder = make_encoder(
                self.observation_space, images=getattr(self.config, "images", "cnn")
            )
            if self.network == "simba":
                return simba_encoder(encoder)
            return encoder
        return encoder_part(self._build("encoder", given), self.observation_space)

    @property
    def network(self) -> str:
        """The default networks' kind, ``config.network`` (``"mlp"`` when the config has none)."""
        return str(getattr(self.config, "network", "mlp"))

    def observe(self, obs: Any) -> None:
        """Merge observations of a training collect into the running statistics of every SimBa
        encoder (target networks copy them with their weights); nothing without one."""
        if self.network != "simba":
            return
        if self._observers is None:
            self._observers = _simba_encoders(self)
            if self.network == "simba" and not self._observers:
                _check_simba_built(self)
        if not self._observers:
            return
        obs = self.obs_tensor(obs)
        for encoder in self._observers:
            encoder.observe(obs)

    _stats_checked = False

    @torch.no_grad()
    def _fit_unseen_statistics(self, buffer: Buffer | None) -> None:
        """At the first update: SimBa statistics that have seen no observation (an offline run
        never collects, so nothing called :meth:`observe`) are fitted to every observation in
        ``buffer``, read in chunks; statistics from collects or a checkpoint stay as they are."""
        if buffer is None or len(buffer) == 0:
            return
        self._stats_checked = True
        if self.network != "simba":
            return
        if self._observers is None:
            self._observers = _simba_encoders(self)
        if not self._observers or any(float(e.norm.count) > 0 for e in self._observers):
            return
        index = buffer.sample_index(0)
        for start in range(0, len(index), 65_536):
            obs = self.obs_tensor(buffer.get(index[start : start + 65_536], "obs"))
            for encoder in self._observers:
                encoder.observe(obs)

    def _build(self, name: str, given: NetworkPart) -> nn.Module:
        """Part ``name`` for one more network: the given module the first time, a fresh copy
        of it after; a factory's new module every time."""
        uses = self._uses.get(name, 0)
        self._uses[name] = uses + 1
        if isinstance(given, nn.Module) and uses:
            return fresh_copy(given)
        return build_part(name, given, self.observation_space, self.action_space)

    def actor_head(self, in_dim: int, out_dim: int, what: str) -> nn.Module | None:
        """The user's actor head, checked to map ``[B, in_dim]`` features to ``[B, out_dim]``
        (``what`` says what those are); None when none was given (build the default)."""
        given = self._given["actor"]
        if given is None:
            if self.network != "mlp":
                return network_body(self.config, "actor", in_dim, out_dim, [])
            return None
        net = self._build("actor", given)
        zeros = torch.zeros(2, in_dim, device=part_device(net))
        return check_output("actor", net, [zeros], [(out_dim,)], what)[0]

    def critic_heads(self, n: int, in_dim: int, out_dim: int, what: str) -> list[nn.Module] | None:
        """``n`` critic heads of the user's (the given module, then fresh copies; or ``n``
        modules of a factory), each checked to map ``[B, in_dim]`` to ``[B, out_dim]`` (or
        ``[B]`` when ``out_dim`` is 1); None when none was given (build the default)."""
        given = self._given["critic"]
        if given is None:
            if self.network != "mlp":
                return [network_body(self.config, "critic", in_dim, out_dim, []) for _ in range(n)]
            return None
        shapes = [(out_dim,), ()] if out_dim == 1 else [(out_dim,)]
        heads = []
        for _ in range(n):
            net = self._build("critic", given)
            zeros = torch.zeros(2, in_dim, device=part_device(net))
            heads.append(check_output("critic", net, [zeros], shapes, what)[0])
        return heads

    def deterministic_actor(self) -> DeterministicActor:
        """DDPG's and TD3's actor, ``tanh(head(encoder(obs)))``, over its own encoder; the head
        is the user's actor when given, else an MLP of ``hidden_sizes_of("actor")``."""
        encoder = self.make_encoder()
        head = self.actor_head(
            int(encoder.out_dim), self.act_dim, "one number per action dimension, before a tanh"
        )
        return DeterministicActor(
            encoder, self.act_dim, self.hidden_sizes_of("actor"), self.config.activation, net=head
        )

    def squashed_gaussian_actor(self, log_std_bounds: tuple[float, float]) -> SquashedGaussianActor:
        """SAC's actor (a tanh-squashed Gaussian) over its own encoder; the head is the user's
        actor when given (the mean, then the log std of each action dimension), else an MLP of
        ``hidden_sizes_of("actor")``."""
        encoder = self.make_encoder()
        head = self.actor_head(
            int(encoder.out_dim), 2 * self.act_dim,
            "the mean, then the log std, of each action dimension",
        )  # fmt: skip
        return SquashedGaussianActor(
            encoder, self.act_dim, self.hidden_sizes_of("actor"), self.config.activation,
            log_std_bounds, net=head,
        )  # fmt: skip

    def gaussian_actor(self, log_std_bounds: tuple[float, float]) -> GaussianActor:
        """The advantage-weighted offline algorithms' actor (IQL, CRR, AWAC): a Gaussian around
        ``tanh(head(encoder(obs)))`` with one learned log std per action dimension, over its own
        encoder; the head is the user's actor when given (the mean of each action dimension,
        before the tanh), else an MLP of ``hidden_sizes_of("actor")``."""
        encoder = self.make_encoder()
        head = self.actor_head(
            int(encoder.out_dim), self.act_dim, "the mean of each action dimension, before a tanh"
        )
        return GaussianActor(
            encoder, self.act_dim, self.hidden_sizes_of("actor"), self.config.activation,
            log_std_bounds, net=head,
        )  # fmt: skip

    def categorical_actor(self) -> CategoricalActor:
        """A categorical policy over a Discrete action space's ``n`` actions, over its own
        encoder; the head is the user's actor when given (the ``n`` logits), else an MLP of
        ``hidden_sizes_of("actor")``."""
        encoder = self.make_encoder()
        n = int(self.action_space.n)  # type: ignore[attr-defined]
        head = self.actor_head(int(encoder.out_dim), n, f"logits of the {n} actions")
        return CategoricalActor(
            encoder, n, self.hidden_sizes_of("actor"), self.config.activation, net=head
        )

    def q_ensemble(self, n: int) -> QEnsemble:
        """``n`` critics over one encoder of their own: ``Q(s, a)`` for Box actions (a head
        reads ``[features, action]``), ``Q(s, .)`` for Discrete ones; the heads are the user's
        critic (``n`` of them) when given, else MLPs of ``hidden_sizes_of("critic")``."""
        encoder = self.make_encoder()
        features = int(encoder.out_dim)
        hidden, activation = self.hidden_sizes_of("critic"), self.config.activation
        if isinstance(self.action_space, gym.spaces.Discrete):
            actions = int(self.action_space.n)
            heads = self.critic_heads(n, features, actions, f"Q of each of the {actions} actions")
            return QEnsemble(encoder, num_actions=actions, hidden=hidden, activation=activation,
                             n=n, heads=heads)  # fmt: skip
        heads = self.critic_heads(
            n, features + self.act_dim, 1, "Q(s, a) of the features and the action concatenated"
        )
        return QEnsemble(encoder, act_dim=self.act_dim, hidden=hidden, activation=activation,
                         n=n, heads=heads)  # fmt: skip

    def hidden_sizes_of(self, part: str) -> list[int]:
        """Hidden widths of the default ``"actor"`` or ``"critic"``: ``config.<part>_hidden_sizes``
        when set, else ``config.hidden_sizes``."""
        own = getattr(self.config, f"{part}_hidden_sizes", None)
        return list(own if own is not None else self.config.hidden_sizes)

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
        if not self._stats_checked:
            self._fit_unseen_statistics(buffer)
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
        if graph.gave_up() or graph.failure is not None:
            reason = graph.failure or (
                f"an optimizer took no fused-Adam step in {graph.calls} warm-up steps"
            )
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
