"""MAPPO's hyperparameters: PPO's, plus what the centralised critic sees. Imports only attrs."""

from __future__ import annotations

from attrs import define

from rlblocks_algo_ppo.config import PPOConfig


@define(kw_only=True)
class MAPPOConfig(PPOConfig):
    """MAPPO (Yu et al., 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
    Games") on top of PPO's settings."""

    critic_obs: bool = True
    """The critic sees the agent's own observation beside the env's global state (the paper's
    agent-specific global state, which tells the agents apart); False: the global state only,
    one value for all agents of a step."""
