"""GAIL (Ho & Ermon, 2016, "Generative Adversarial Imitation Learning").

Imitation from an expert's transitions ``D_E = {(s, a)}`` (the dataset; its rewards are not
read) without the env's reward: the policy is trained by an on-policy learner (PPO by default)
on a reward that a discriminator learns as it goes. One update, after each collect of the
on-policy trainer, in the paper's order (its Algorithm 1):

1. The discriminator ``D(s, a) = sigmoid(f(s, a))``, the probability that a step is the
   expert's, takes ``disc_epochs`` passes over the rollout ``R`` the policy just played, each
   minibatch of policy steps against as many expert steps drawn from ``D_E``, minimising the
   logistic loss of telling them apart::

       L_D = -mean_E log D(s, a) - mean_R log(1 - D(s, a))

   Its inputs are the observation (normalised with the dataset's per-feature statistics) and
   the action as the env runs it: a Box action bounded as the learner bounds it, a discrete one
   one-hot.

2. Each step of the rollout gets the reward of the updated discriminator, in place of the
   env's (which is only logged: ``reward/env``)::

       airl:  r(s, a) = log D - log(1 - D) = f(s, a)          (the default)
       gail:  r(s, a) = -log(1 - D) = softplus(f(s, a))       (the paper's cost log D_pi)

3. The learner takes its usual update on the rollout with those rewards (its GAE advantages,
   value targets and losses all read them).

The learner is built by name through the registry (``algo.learner``, ``algo.learner_config``)
with the networks given to GAIL; GAIL acts as it does, so the trained policy is the learner's
and the discriminator is used only while learning.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo import BasePolicy, DatasetObsNorm, OptimizerStep
from rlblocks.algo.nets import MLP, make_encoder, obs_to_tensor
from rlblocks.contracts import Batch, Buffer, BufferAbilities, ConfigError
from rlblocks.run import make_policy, spec_lookup, structure_options
from rlblocks_algo_gail.config import GAILConfig, learner_problem


class Discriminator(nn.Module):
    """``f(s, a)``: the logit ``[B]`` of the probability that ``(s, a)`` is the expert's, from
    the encoded observation and the action's features concatenated. Its output layer starts at
    zero, so ``D = 1/2`` everywhere until it has seen data: the first reward prefers no step
    (random initial logits would be a random reward the learner starts chasing)."""

    def __init__(
        self, encoder: nn.Module, act_dim: int, hidden: list[int], activation: str
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = MLP(int(encoder.out_dim) + act_dim, hidden, 1, activation=activation)
        out = self.net[-1]
        assert isinstance(out, nn.Linear)
        nn.init.zeros_(out.weight)
        nn.init.zeros_(out.bias)

    def forward(self, obs: Any, act: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([self.encoder(obs), act], dim=-1)).squeeze(-1)


class RewardView:
    """A rollout's buffer as the learner reads it: every read of ``rew`` gives the learned
    reward of the slots, every other read is the buffer's own."""

    def __init__(self, buffer: Buffer, index: np.ndarray, rew: np.ndarray) -> None:
        self._buffer = buffer
        self._rew = np.zeros(buffer.maxsize, dtype=np.float32)
        self._rew[index] = rew

    def __len__(self) -> int:
        return len(self._buffer)

    def _slots(self, index: Any) -> Any:
        """Buffer slots of ``index``: a slice counts positions in time order, as buffers read
        it (``buf[:]`` is ``buf[buf.sample_index(0)]``)."""
        if isinstance(index, slice):
            return self._buffer.sample_index(0)[index]
        return np.asarray(index)

    def __getitem__(self, index: Any) -> Batch:
        slots = self._slots(index)
        batch = self._buffer[slots]
        batch.rew = self._rew[slots]
        return batch

    def sample(self, batch_size: int) -> tuple[Batch, np.ndarray]:
        batch, index = self._buffer.sample(batch_size)
        batch.rew = self._rew[index]
        return batch, index

    def get(self, index: Any, key: str, default: Any = None, stack_num: int | None = None) -> Any:
        if key == "rew":
            return self._rew[self._slots(index)]
        return self._buffer.get(index, key, default, stack_num)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "rew":
            return self._rew
        return getattr(self._buffer, name)


class GAILPolicy(DatasetObsNorm, BasePolicy):
    """GAIL: the learner's policy (see :class:`GAILConfig`), a discriminator, and the expert's
    transitions given with :meth:`set_dataset` (a run gives ``buffer.dataset``).

    ``encoder``, ``actor`` and ``critic`` are the learner's networks (those it takes: ppo takes
    all three, reinforce no critic)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: GAILConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        super().__init__(observation_space, action_space, device=device, action_scaling=False)
        c = self.config = config or GAILConfig()
        problem = learner_problem(c.learner)
        if problem is not None:
            raise ConfigError(f"$.algo.learner: {problem}")
        learner_config = None
        spec = spec_lookup("algo", c.learner)
        if spec.config is not None:
            learner_config = structure_options(
                spec.config, c.learner_config, label=f"algo.learner_config ({c.learner})",
                root="$.algo.learner_config",
            )  # fmt: skip
        # 3. the policy and its learning: the learner's own, built by name
        self.learner: BasePolicy = make_policy(
            c.learner, observation_space, action_space, device=str(self.device),
            config=learner_config, **nets,
        )  # fmt: skip
        self.custom_networks = self.learner.custom_networks
        self.view_requirements = self.learner.view_requirements
        self.quantized_actions = self.learner.quantized_actions
        # 1. the discriminator, over the dataset's normalised observations and env actions
        self.init_obs_norm(observation_space, c.obs_norm, c.obs_norm_eps, "GAIL")
        encoder = make_encoder(observation_space, images=c.images)
        self.discriminator = Discriminator(
            encoder, self._act_features(action_space), list(c.hidden_sizes), c.activation
        )
        self.to(self.device)
        self.disc_step = self.add_optimizer(
            "discriminator",
            OptimizerStep(self.discriminator, c.lr, max_grad_norm=c.max_grad_norm),
        )
        for name, step in self.learner.optim_steps.items():
            self.optim_steps[f"learner/{name}"] = step  # checkpointed and scheduled with GAIL's
        self.dataset: Buffer | None = None

    # -- the expert's data ----------------------------------------------------------------------
    def set_dataset(self, dataset: Buffer) -> None:
        """Learn against the expert transitions in ``dataset`` (a buffer of the env's
        observations and actions, actions in the policy's units as rlblocks buffers store
        them); fits the discriminator's observation statistics to it unless loaded ones are
        there."""
        if len(dataset) == 0:
            raise ConfigError(
                "GAIL's dataset holds no transitions; give it a buffer of the expert's play "
                "(ReplayBuffer.load_hdf5(path), --dataset FILE)"
            )
        obs = np.asarray(dataset.get(dataset.sample_index(0)[:1], "obs"))
        shape = tuple(self.observation_space.shape or ())
        if isinstance(self.observation_space, gym.spaces.Box) and obs.shape[1:] != shape:
            raise ConfigError(
                f"the dataset's observations have shape {obs.shape[1:]}, and the policy's "
                f"observation space {self.observation_space} has {shape}; give a dataset "
                "recorded on this env"
            )
        if BufferAbilities.of(dataset).relabelling:
            raise ConfigError(
                "GAIL's dataset relabels what it samples (hindsight relabelling); give it a "
                "plain buffer of the expert's transitions"
            )
        self.dataset = dataset
        if self.obs_norm and float(self.obs_count) == 0:
            self.fit_obs_norm(dataset)

    # -- the discriminator's inputs -------------------------------------------------------------
    @staticmethod
    def _act_features(space: gym.Space) -> int:
        if isinstance(space, gym.spaces.Discrete):
            return int(space.n)
        if isinstance(space, gym.spaces.MultiDiscrete):
            return int(np.sum(space.nvec))
        if isinstance(space, gym.spaces.Box):
            return int(np.prod(space.shape))
        raise TypeError(f"GAIL needs Box, Discrete or MultiDiscrete actions, got {space}")

    def disc_inputs(self, obs: Any, act: Any) -> tuple[Any, torch.Tensor]:
        """The discriminator's view of steps: normalised observations, and actions as the env
        runs them (a Box action bounded as the learner bounds it, in [-1, 1] when it scales;
        discrete ones one-hot)."""
        obs_t = self.normalize_obs(obs_to_tensor(obs, self.device))
        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            act_t = self.as_tensor(act).reshape(len(act), -1)
            bound = self.learner.action_bound_method
            if bound == "tanh":
                act_t = torch.tanh(act_t)
            elif bound == "clip" and self.learner.action_scaling:
                act_t = act_t.clamp(-1.0, 1.0)
            return obs_t, act_t
        act_i = self.as_tensor(act, dtype=torch.long)
        if isinstance(space, gym.spaces.Discrete):
            return obs_t, F.one_hot(act_i.reshape(-1), int(space.n)).float()
        parts = [F.one_hot(act_i[:, i], int(n)) for i, n in enumerate(space.nvec)]  # type: ignore[attr-defined]
        return obs_t, torch.cat(parts, dim=-1).float()

    def logits(self, obs: Any, act: Any) -> torch.Tensor:
        """``f(s, a)`` ``[B]``: the discriminator's logit that each step is the expert's."""
        return self.discriminator(*self.disc_inputs(obs, act))

    # -- 1. the discriminator's update ----------------------------------------------------------
    def learn_discriminator(self, obs: Any, act: Any) -> dict[str, float]:
        """``disc_epochs`` passes over the rollout's steps (``obs``, ``act``), each minibatch
        against as many expert steps; returns the mean loss and how often each side is told
        right."""
        assert self.dataset is not None
        c = self.config
        n = len(act)
        sums = torch.zeros(3, device=self.device)  # loss, expert told, policy told
        count = 0
        for _ in range(c.disc_epochs):
            for rows in np.array_split(
                self._rng.permutation(n), max(1, -(-n // c.disc_batch_size))
            ):
                expert, _ = self.dataset.sample(len(rows))
                own = self.logits(_rows(obs, rows), np.asarray(act)[rows])
                theirs = self.logits(expert.obs, expert.act)
                # -log D(expert) - log(1 - D(policy)), D = sigmoid(f)
                loss = F.softplus(-theirs).mean() + F.softplus(own).mean()
                self.disc_step.step(loss)
                with torch.no_grad():
                    told = torch.stack([(theirs > 0).float().mean(), (own < 0).float().mean()])
                    sums += torch.cat([loss.detach().reshape(1), told])
                count += 1
        if count == 0:
            return {}
        loss, expert_told, policy_told = (sums / count).tolist()
        return {"disc/loss": loss, "disc/expert_acc": expert_told, "disc/policy_acc": policy_told}

    # -- 2. the learned reward ------------------------------------------------------------------
    @torch.no_grad()
    def reward(self, obs: Any, act: Any) -> torch.Tensor:
        """The learner's reward ``[B]`` of steps: ``log D - log(1 - D)`` (``airl``) or
        ``-log(1 - D)`` (``gail``)."""
        logit = self.logits(obs, act)
        return logit if self.config.reward == "airl" else F.softplus(logit)

    # -- 3. the update --------------------------------------------------------------------------
    def update(self, sample_size: int, buffer: Buffer | None, **kwargs: Any) -> dict[str, Any]:
        """Discriminator, learned reward, the learner's update on the rollout in ``buffer``
        (``sample_size`` and ``kwargs`` are the learner's: ``update(0, buffer, batch_size=...,
        repeat=...)`` from the on-policy trainer)."""
        if buffer is None or len(buffer) == 0:
            return {}
        if self.dataset is None:
            raise ConfigError(
                "GAIL learns against an expert's transitions and has none; give them with "
                "policy.set_dataset(buffer) (a run gives --dataset FILE)"
            )
        if BufferAbilities.of(buffer).relabelling:
            raise ConfigError(
                "GAIL's learner reads the learned reward, and this buffer relabels what it "
                "samples (hindsight relabelling); use a plain buffer"
            )
        index = buffer.sample_index(0)
        steps = buffer[index]
        self.updating = True
        try:
            stats = self.learn_discriminator(steps.obs, steps.act)
            rew = self.reward(steps.obs, steps.act)
        finally:
            self.updating = False
        view = RewardView(buffer, index, rew.cpu().numpy())
        out = dict(self.learner.update(sample_size, view, **kwargs))  # type: ignore[arg-type]
        self.gradient_steps = self.learner.gradient_steps
        out.update(stats)
        out["reward/learned"] = float(rew.mean())
        out["reward/env"] = float(np.mean(steps.rew))  # logged, never learned from
        return out

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        """GAIL learns in :meth:`update` (the discriminator needs the whole rollout first)."""
        raise NotImplementedError("GAIL learns through update(), which trains the discriminator")

    # -- acting: the learner's ------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """The learner's action (sampled while collecting, its mode when testing)."""
        return self.learner(batch, state=state, **kwargs)

    def exploration_noise(self, act: np.ndarray, batch: Batch) -> np.ndarray:
        return self.learner.exploration_noise(act, batch)

    def map_action(self, act: np.ndarray) -> np.ndarray:
        return self.learner.map_action(act)

    def map_action_inverse(self, act: np.ndarray) -> np.ndarray:
        return self.learner.map_action_inverse(act)

    # -- bookkeeping shared with the learner ----------------------------------------------------
    def set_env_step(self, env_step: int) -> None:
        super().set_env_step(env_step)
        self.learner.env_step = env_step

    def seed(self, seed: int | None) -> None:
        super().seed(seed)
        self.learner.seed(None if seed is None else seed + 1)

    def schedule_stats(self) -> dict[str, float]:
        """Every optimizer's learning rate (``lr/discriminator``, ``lr/learner/<name>``) and the
        learner's other schedules."""
        own = {k: v for k, v in self.learner.schedule_stats().items() if not k.startswith("lr/")}
        return {**own, **super().schedule_stats()}

    def extra_state(self) -> dict[str, Any]:
        """GAIL's counters and every optimizer (the learner's under ``learner/``), and the
        learner's own counters and random stream."""
        learner = dict(self.learner.extra_state())
        learner.pop("optimizers", None)  # saved with GAIL's, under learner/<name>
        return {**super().extra_state(), "learner": learner}

    def load_extra_state(self, state: Any) -> None:
        super().load_extra_state(state)
        learner = state.get("learner")
        if learner is not None:
            self.learner.load_extra_state(learner)


def _rows(obs: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of observations (an array, or a Batch / dict of arrays)."""
    if isinstance(obs, Batch | dict):
        return {k: _rows(obs[k], rows) for k in obs.keys()}  # noqa: SIM118
    return np.asarray(obs)[rows]
