"""BCQ's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators)."""

from __future__ import annotations

from attrs import define, field, validators

from rlblocks.algo import ContinuousActorCriticConfig
from rlblocks.contracts import validators as check


@define(kw_only=True)
class BCQConfig(ContinuousActorCriticConfig):
    """Batch-Constrained deep Q-learning (Fujimoto, Meger & Precup, 2019, "Off-Policy Deep
    Reinforcement Learning without Exploration", ICML), for Box actions.

    The defaults are the paper's (its Section 4 and the experimental details of its
    supplementary material, which the authors' code, github.com/sfujim/BCQ, also uses): Adam at
    1e-3 for every network, batch 100 (the trainer's ``batch_size``), the perturbation model and
    both critics with hidden layers of 400 and 300 units, the VAE's encoder and decoder with two
    of 750, a latent of twice the action dimension, ``gamma`` 0.99, ``tau`` 0.005, ``phi`` 0.05,
    ``lmbda`` 0.75 and ``n`` = 10 sampled actions. The VAE's loss weighs its KL term by 0.5 and
    samples its latent from a unit Gaussian clipped to [-0.5, 0.5], as the authors' code does.
    """

    # -- the networks, with the paper's sizes and learning rates ----------------------------------
    hidden_sizes: list[int] = field(factory=lambda: [400, 300], validator=check.hidden_sizes)
    """Widths of the hidden layers of the perturbation model and of each critic."""
    actor_lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of the perturbation model ``xi``."""
    critic_lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of the two critics."""
    vae_hidden_sizes: list[int] = field(factory=lambda: [750, 750], validator=check.hidden_sizes)
    """Widths of the hidden layers of the VAE's encoder and of its decoder."""
    vae_lr: float = field(default=1e-3, validator=check.positive)
    """Adam learning rate of the VAE."""
    latent_dim: int | None = field(default=None, validator=validators.optional(validators.ge(1)))
    """Dimension of the VAE's latent; None: twice the action dimension (the authors')."""
    kl_weight: float = field(default=0.5, validator=check.non_negative)
    """Weight of the KL term in the VAE's loss ``MSE(a, D(s, z)) + kl_weight * KL``."""
    latent_clip: float = field(default=0.5, validator=check.positive)
    """Latents drawn to generate actions come from ``N(0, I)`` clipped to
    ``[-latent_clip, latent_clip]``: the VAE's likely region, not its tails."""

    # -- the batch constraint ----------------------------------------------------------------------
    phi: float = field(default=0.05, validator=check.non_negative)
    """``Phi``: the perturbation model moves a generated action by at most ``phi`` per dimension
    ([-1, 1] units, so ``phi * max_action`` in the env's). 0: only the VAE's actions (behaviour
    cloning with a Q-based choice); 2 or more: any action, the constraint gone."""
    num_sampled_actions: int = field(default=10, validator=validators.ge(1))
    """``n``: actions generated per state, both to act (the best of them under ``Q_1``) and for
    the target (the best of them under the soft clipped double Q)."""
    lmbda: float = field(default=0.75, validator=check.unit_interval)
    """``lambda`` of the soft clipped double-Q target ``lambda min(Q'_1, Q'_2) + (1 - lambda)
    max(Q'_1, Q'_2)``: 1 is TD3's clipped double Q, 0.5 their mean."""
    deterministic_eval: bool = True
    """Tests act on a fixed set of ``n`` latents (drawn once, saved with the weights), so a test
    is a function of the state; False draws fresh latents at every step, as while training."""
