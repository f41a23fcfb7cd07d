"""DQN: Q-learning with a neural network, a replay buffer and a target network.

Target (n-step, partial-episode bootstrapping; core's :class:`~rlblocks.algo.OffPolicyPolicy`
walks the episode and calls :meth:`DQNPolicy.target_value`)::

    y_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated) Q_target(s_{t+m}, a*)
    a*  = argmax_a Q_online(s_{t+m}, a)   if double else   argmax_a Q_target(s_{t+m}, a)

with m <= n_step cut at the episode's end. Loss: Huber or MSE between Q(s_t, a_t) and y_t,
weighted by a prioritized sampler's importance weights.

Observations of any space go through core's :class:`~rlblocks.algo.nets.ObsEncoder` inside the
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
from torch import nn
from torch.nn.modules import module as _torch_module

from rlblocks.algo import (
    OffPolicyPolicy,
    OptimizerStep,
    TargetNetwork,
    epsilon_greedy,
    masked_argmax,
    masked_epsilon_greedy,
    observation_mask,
    value_network,
)
from rlblocks.algo.nets import NetworkPart, ObsEncoder, QNetwork
from rlblocks.contracts import Batch, has_action_mask
from rlblocks_algo_dqn.config import DQNConfig


class DQNPolicy(OffPolicyPolicy):
    """DQN over discrete actions. ``model`` defaults to a :class:`QNetwork` over the
    observation encoder (``encoder``, yours or the default one); your own ``model`` (a module
    or a factory of the spaces) takes the observation tensors, or the features of your
    ``encoder`` when you give one too, and returns ``[B, A]``, or ``([B, A], state)`` as the
    thesis' networks do (checked and adapted once, here; see
    :func:`~rlblocks.algo.value_network`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: DQNConfig | None = None,
        device: str | torch.device = "cpu",
        model: NetworkPart | None = None,
        encoder: NetworkPart | None = None,
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
        #: observations carry an action mask: acting, exploration and targets honour it
        self._masked = has_action_mask(observation_space)
        default_model = model is None and encoder is None
        self.note_networks(encoder=encoder, model=model)

        def q_network(obs_encoder: nn.Module) -> nn.Module:
            return QNetwork(
                obs_encoder.out_dim,
                self.num_actions,
                hidden=c.hidden_sizes,
                dueling=c.dueling,
                activation=c.activation,
                encoder=obs_encoder,
                network=c.network,
                network_width=c.network_width,
                network_blocks=c.network_blocks,
            )

        self.model = value_network(
            observation_space, action_space, q_network, (self.num_actions,),
            f"Q-values of the {self.num_actions} actions", c.images, encoder, model, c.network,
        ).to(self.device)  # fmt: skip
        self._cpu = self.device.type == "cpu"
        # the default network over flat Box observations acts through plain tensor calls
        self._acting: _PlainQForward | None = (
            _PlainQForward.of(self.model, observation_space) if default_model else None
        )
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
        """Greedy actions (``eps_test`` of them random in test mode): ``Batch(act [B],
        logits=q [B, A])``, as indices from 0 (``map_action`` adds the space's ``start``)."""
        obs = batch.obs
        if type(obs) is np.ndarray and obs.dtype is _FLOAT32 and self._cpu:
            x = torch.from_numpy(obs)  # what obs_tensor does for this case, at a third the cost
        else:
            x = self.obs_tensor(obs)
        if model != "model":
            q = self.target_model(x)
        else:
            net = self._modules["model"]  # self.model, without nn.Module.__getattr__
            acting = self._acting
            q = acting(x) if acting is not None and acting.usable(net) else net(x)
        mask = observation_mask(x) if self._masked else None
        if mask is not None:  # the best legal action; the mask rides along for exploration
            act = masked_argmax(q.detach(), mask).cpu().numpy()
        elif q.is_cpu:  # numpy's argmax of a few rows costs a third of torch's
            act = (q.detach() if q.requires_grad else q).numpy().argmax(axis=1)
        else:
            act = q.argmax(dim=1).cpu().numpy()
        out = Batch(act=act, logits=q, state=state)
        if mask is not None:
            out.mask = mask
        if not self.training and self.config.eps_test:
            # a test plays eps_test of its actions at random (the trainer's tests, agent.act
            # and agent.evaluate alike); the collector explores only in training mode
            out.act = self.exploration_noise(act, out)
        return out

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
        """Replace each action by a uniformly random one with probability epsilon (one
        generator call per env step: :func:`rlblocks.algo.epsilon_greedy`); a random legal one
        when the observations carry an action mask (``batch.mask``, set by :meth:`forward`)."""
        mask = batch.get("mask", None) if self._masked else None
        if mask is not None:
            return masked_epsilon_greedy(act, self.epsilon, mask, self._rng)
        return epsilon_greedy(act, self.epsilon, self.num_actions, 0, self._rng)

    # -- learning -----------------------------------------------------------------------------
    def target_value(self, obs_next: Any) -> torch.Tensor:
        q_target = self.target_model(obs_next)
        mask = observation_mask(obs_next) if self._masked else None  # legal next actions
        if self.config.double and self.use_target:
            best = masked_argmax(self.model(obs_next), mask).unsqueeze(1)
        else:
            best = masked_argmax(q_target, mask).unsqueeze(1)
        return q_target.gather(1, best).squeeze(1)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        q = self.model(self.obs_tensor(batch.obs))
        act = torch.as_tensor(batch.act, dtype=torch.long, device=self.device)  # indices
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


_FLOAT32 = np.dtype(np.float32)


class _PlainQForward:
    """The forward of the default :class:`QNetwork` (flat Box observations, no dueling head) as
    plain tensor calls: ``flatten -> float -> body layers``, with each ``Linear`` as one
    ``linear`` call, a ReLU after it in place, and every other layer through its ``forward``.

    ``model(x)`` runs nine ``nn.Module.__call__`` dispatches for a 3-layer MLP, which cost
    two thirds of a forward pass on a batch of 8 observations; acting calls the network once
    per env step. Results are the same as ``model(x)``; :meth:`usable` says when that holds
    (the network's layers are still the ones seen here, and no module hook is registered).
    """

    def __init__(self, model: QNetwork) -> None:
        self.encoder = model.encoder
        self.body = model.body
        self.layers = list(model.body._modules.values())
        # per layer: the Linear's parameter dict (read at each call: optimizers and
        # load_state_dict change the tensors in place or replace them there) or a callable
        self.plan: list[tuple[dict[str, Any] | None, Any]] = []
        after_linear = False
        for layer in self.layers:
            if type(layer) is nn.Linear:
                self.plan.append((layer._parameters, None))
            elif type(layer) is nn.ReLU and after_linear:
                # in place: a Linear's fresh output, which autograd does not need again
                self.plan.append((None, _relu_in_place))
            else:
                self.plan.append((None, layer.forward))
            after_linear = type(layer) is nn.Linear
        # the hook tables of every module that nn.Module.__call__ would consult (registering a
        # hook adds to one of them): polled at each call, a few dozen truth tests
        self.hook_tables: list[dict[Any, Any]] = []
        for m in model.modules():
            self.hook_tables += [
                m._forward_hooks,
                m._forward_pre_hooks,
                m._backward_hooks,
                m._backward_pre_hooks,
            ]

    @classmethod
    def of(cls, model: nn.Module, space: gym.Space) -> _PlainQForward | None:
        """A plain forward of ``model`` when it is the default network over flat Box
        observations, else None."""
        if (
            type(model) is not QNetwork
            or model.dueling
            or not isinstance(space, gym.spaces.Box)
            or not isinstance(model.encoder, ObsEncoder)
            or next(model.encoder.parameters(), None) is not None  # an image CNN
            or not isinstance(model.body, nn.Sequential)
        ):
            return None
        return cls(model)

    def usable(self, model: nn.Module) -> bool:
        """Whether ``model`` still is the network seen at construction, without hooks."""
        parts = model._modules
        return (
            parts.get("encoder") is self.encoder
            and parts.get("body") is self.body
            and list(self.body._modules.values()) == self.layers
            and not any(self.hook_tables)
            and not _global_hooks()
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.dim() != 2:
            x = x.reshape(x.shape[0], -1).float()  # the encoder of a flat (non-image) Box
        linear = F.linear
        for params, call in self.plan:
            x = linear(x, params["weight"], params["bias"]) if call is None else call(x)
        return x


def _global_hooks() -> bool:
    """Whether a module hook is registered for every module (torch.nn.modules.module)."""
    g = _torch_module
    return bool(
        g._global_forward_hooks
        or g._global_forward_pre_hooks
        or g._global_backward_hooks
        or g._global_backward_pre_hooks
    )


def _relu_in_place(x: torch.Tensor) -> torch.Tensor:
    return x.relu_()
