"""MADDPG's hyperparameters (and those every centralised-critic learner of many agents shares,
which MASAC builds on), each with its default and meaning. Imports only attrs (and core's
attrs-only validators): plugin specs import config classes while listing plugins."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.contracts import validators as check


@define(kw_only=True)
class MultiAgentActorCriticConfig:
    """Decentralised actors and centralised critics over a joint view of many agents (all
    agents' observations, the env's global state and all agents' actions in one step)."""

    hidden_sizes: list[int] = field(factory=lambda: [64, 64], validator=check.hidden_sizes)
    """Widths of the hidden layers of the actors and of each critic."""
    actor_hidden_sizes: list[int] | None = field(
        default=None, validator=check.optional_hidden_sizes
    )
    """Widths of the actors' hidden layers; None: ``hidden_sizes``."""
    critic_hidden_sizes: list[int] | None = field(
        default=None, validator=check.optional_hidden_sizes
    )
    """Widths of the critics' hidden layers; None: ``hidden_sizes``."""
    activation: str = field(default="relu", validator=check.activation)
    """Activation between hidden layers (relu, tanh, elu, gelu, silu)."""
    actor_lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of the actors."""
    critic_lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of the critics."""
    gamma: float = field(default=0.95, validator=check.unit_interval)
    """Discount factor (0.95: the MADDPG paper's, for MPE's 25-step episodes)."""
    tau: float = field(default=0.01, validator=check.unit_interval_open_low)
    """Polyak rate of the target networks (0.01: the MADDPG paper's)."""
    n_step: int = field(default=1, validator=validators.ge(1))
    """Steps of real reward before bootstrapping the targets (cut at episode ends)."""
    max_grad_norm: float | None = field(
        default=0.5, validator=check.optional(check.positive, "no clipping")
    )
    """Clip each network's global gradient norm to this (0.5: the MADDPG authors' code); None:
    no clipping."""
    share_actor: bool = True
    """One actor for every agent, reading the agent's own observation and a one-hot of its
    index (parameter sharing); False: a separate actor per agent, as in the MADDPG paper."""
    share_critic: bool = True
    """One centralised critic for every agent, told which agent's value it gives by a one-hot
    of its index; False: a separate critic per agent, as in the paper."""
    critic_input: str = field(default="state", validator=validators.in_(["state", "obs"]))
    """What the centralised critics read besides all agents' actions: ``state`` (the env's
    global state) or ``obs`` (all agents' observations, the paper's ``x``)."""
    agent_rewards: bool = True
    """Each agent's critic learns from that agent's own reward (the joint view's
    ``info["agent_rewards"]``, stored by the collector with every step); False: every critic
    learns from the team reward (the sum), for cooperative tasks or envs that report no
    per-agent rewards."""


@define(kw_only=True)
class MADDPGConfig(MultiAgentActorCriticConfig):
    """MADDPG (Lowe et al., 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive
    Environments"): deterministic actors, one centralised critic per agent, Polyak-averaged
    targets and exploration noise; with ``td3`` it is MATD3 (Ackermann et al., 2019, "Reducing
    Overestimation Bias in Multi-Agent Domains Using Double Centralized Critics")."""

    exploration: str = field(default="gaussian", validator=validators.in_(["gaussian", "ou"]))
    """Exploration noise added to the actors' actions while collecting: ``gaussian``
    (independent per step) or ``ou`` (Ornstein-Uhlenbeck, correlated in time)."""
    exploration_sigma: float = field(default=0.1, validator=check.non_negative)
    """Standard deviation of the exploration noise, in the actors' [-1, 1] units."""
    clip_exploration: bool = True
    """Clip the noisy action to [-1, 1] where the noise is added, so the buffer keeps the action
    the env ran; False keeps the unclipped action in the buffer (only the env's copy is
    bounded)."""
    td3: bool = False
    """MATD3: twin critics per agent (targets take their minimum), target policy smoothing and
    delayed actor updates, TD3's three changes applied to every agent's critic."""
    policy_noise: float = field(default=0.2, validator=check.non_negative)
    """MATD3: standard deviation of the smoothing noise added to target actions."""
    noise_clip: float = field(default=0.5, validator=check.non_negative)
    """MATD3: the smoothing noise is clipped to ``[-noise_clip, noise_clip]``."""
    policy_delay: int = field(default=2, validator=validators.ge(1))
    """MATD3: critic steps per actor step; the target networks move on actor steps only."""
