"""PSRL: posterior sampling for reinforcement learning in tabular MDPs.

Osband, Russo and Van Roy (2013), "(More) Efficient Reinforcement Learning via Posterior
Sampling". The agent keeps a posterior over the MDP and, for each collect (each episode with
the defaults), acts optimally in one MDP drawn from it::

    P(. | s, a) ~ Dirichlet(prior + counts(s, a, .))        over the S states and "the end"
    R(s, a)     ~ Normal(mu_n, sigma_n^2)                    with, after n rewards summing to r:
                  1 / sigma_n^2 = 1 / prior_std^2 + n / noise_std^2
                  mu_n          = sigma_n^2 * (prior_mean / prior_std^2 + r / noise_std^2)
    Q(s, a)     = R(s, a) + gamma * sum_s' P(s' | s, a) V(s'),  V(s) = max_a Q(s, a)
                  (value iteration; "the end" is worth 0)

The counts of terminated transitions go to the extra outcome "the end", so an episode's last
observation (a goal or a hole) is not mistaken for a state to act from. An untried (s, a) has
the prior's spread of rewards and next states, so some draws make it look best and the agent
tries it: exploration comes from the posterior's uncertainty, not from noise. The counts and the
greedy Q-tables are buffers of the module (in ``state_dict``), the sampling generator is in
``extra_state``: a resumed run samples what it would have.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.algo import BasePolicy
from rlblocks.contracts import Batch, ConfigError
from rlblocks_algo_psrl.config import PSRLConfig


def _discrete(space: gym.Space, what: str) -> gym.spaces.Discrete:
    if not isinstance(space, gym.spaces.Discrete):
        raise ConfigError(
            f"psrl learns a table over Discrete {what}, got {space}; use a tabular env "
            "(FrozenLake-v1, Taxi-v3, CliffWalking-v1) or an algorithm with networks (dqn, ppo)"
        )
    return space


def value_iteration(
    reward: np.ndarray, transition: np.ndarray, gamma: float, tolerance: float, max_iter: int
) -> np.ndarray:
    """Q ``[S, A]`` of the MDP with mean rewards ``reward [S, A]`` and next-state probabilities
    ``transition [S, A, S + 1]`` (the last outcome ends the episode, worth 0)."""
    n_states = reward.shape[0]
    inner = transition[:, :, :n_states]
    q = reward.copy()
    value = np.zeros(n_states)
    for _ in range(max_iter):
        q = reward + gamma * inner @ value
        new = q.max(axis=1)
        if np.max(np.abs(new - value)) <= tolerance:
            return q
        value = new
    return q


class PSRLPolicy(BasePolicy):
    """PSRL over Discrete observations and actions (see :class:`PSRLConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: PSRLConfig | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        super().__init__(observation_space, action_space, device=device)
        obs = _discrete(observation_space, "observations")
        act = _discrete(action_space, "actions")
        self.config = config or PSRLConfig()
        self.n_states, self.n_actions = int(obs.n), int(act.n)
        self._obs_start = int(obs.start)
        s, a = self.n_states, self.n_actions
        f64 = torch.float64
        #: visits of (s, a) that led to each next state, the last column: to the episode's end
        self.register_buffer("transition_count", torch.zeros(s, a, s + 1, dtype=f64))
        self.register_buffer("reward_sum", torch.zeros(s, a, dtype=f64))
        self.register_buffer("visit_count", torch.zeros(s, a, dtype=f64))
        #: Q of the MDP last sampled (acting in training) and of the posterior mean (tests)
        self.register_buffer("q_sampled", torch.zeros(s, a, dtype=f64))
        self.register_buffer("q_mean", torch.zeros(s, a, dtype=f64))
        self._solved_once = False

    # -- the posterior ------------------------------------------------------------------------
    def reward_posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation ``[S, A]`` of each (s, a)'s mean reward."""
        c = self.config
        n = self.visit_count.cpu().numpy()
        precision = 1.0 / c.reward_prior_std**2 + n / c.reward_noise_std**2
        var = 1.0 / precision
        total = self.reward_sum.cpu().numpy()
        mean = var * (c.reward_prior_mean / c.reward_prior_std**2 + total / c.reward_noise_std**2)
        return mean, np.sqrt(var)

    def transition_posterior(self) -> np.ndarray:
        """Dirichlet parameters ``[S, A, S + 1]`` of each (s, a)'s next state."""
        return self.transition_count.cpu().numpy() + self.config.transition_prior

    def sample_mdp(self) -> tuple[np.ndarray, np.ndarray]:
        """Rewards ``[S, A]`` and transitions ``[S, A, S + 1]`` drawn from the posterior (with
        the policy's generator, so a seed or a resume fixes them)."""
        mean, std = self.reward_posterior()
        reward = self._rng.normal(mean, std)
        # a Dirichlet draw is normalised Gamma draws, all (s, a) at once
        gammas = self._rng.gamma(self.transition_posterior())
        return reward, gammas / gammas.sum(axis=-1, keepdims=True)

    def solve(self) -> None:
        """Sample an MDP and solve it (the training policy), and solve the posterior mean (the
        test policy)."""
        c = self.config
        reward, transition = self.sample_mdp()
        q = value_iteration(reward, transition, c.gamma, c.vi_tolerance, c.vi_max_iterations)
        self.q_sampled.copy_(torch.from_numpy(q))
        alpha = self.transition_posterior()
        mean_p = alpha / alpha.sum(axis=-1, keepdims=True)
        q_mean = value_iteration(
            self.reward_posterior()[0], mean_p, c.gamma, c.vi_tolerance, c.vi_max_iterations
        )
        self.q_mean.copy_(torch.from_numpy(q_mean))

    # -- acting -------------------------------------------------------------------------------
    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        """The greedy action of each observation under the sampled MDP's Q (training), or the
        posterior mean's (tests with ``test_on_mean``)."""
        if not self._solved_once and not self.visit_count.any():
            self.solve()  # the first collect acts on a draw from the prior
            self._solved_once = True
        obs = np.asarray(batch.obs, dtype=np.int64).reshape(-1) - self._obs_start
        table = self.q_mean if (not self.training and self.config.test_on_mean) else self.q_sampled
        q = table.cpu().numpy()[obs]
        return Batch(act=q.argmax(axis=1), logits=q, state=state)

    # -- learning -----------------------------------------------------------------------------
    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        """Add the batch's transitions to the counts, then sample and solve the next MDP."""
        obs = np.asarray(batch.obs, dtype=np.int64).reshape(-1) - self._obs_start
        act = np.asarray(batch.act, dtype=np.int64).reshape(-1)
        nxt = np.asarray(batch.obs_next, dtype=np.int64).reshape(-1) - self._obs_start
        rew = np.asarray(batch.rew, dtype=np.float64).reshape(-1)
        ended = np.asarray(batch.terminated, dtype=bool).reshape(-1)
        outcome = np.where(ended, self.n_states, nxt)
        counts = np.zeros(self.transition_count.shape)
        np.add.at(counts, (obs, act, outcome), 1.0)
        self.transition_count += torch.from_numpy(counts)
        visits = np.zeros(self.visit_count.shape)
        np.add.at(visits, (obs, act), 1.0)
        self.visit_count += torch.from_numpy(visits)
        sums = np.zeros(self.reward_sum.shape)
        np.add.at(sums, (obs, act), rew)
        self.reward_sum += torch.from_numpy(sums)
        self.solve()
        self._solved_once = True
        self.gradient_steps += 1
        return {
            "visited_pairs": float((self.visit_count > 0).sum()),
            "q_mean_max": float(self.q_mean.max()),
            "gradient_steps": 1,
        }

    def load_extra_state(self, state: Any) -> None:
        super().load_extra_state(state)
        self._solved_once = True  # the Q-tables came with the weights
