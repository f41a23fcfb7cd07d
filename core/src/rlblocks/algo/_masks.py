"""Masked acting and targets for every algorithm over Discrete and MultiDiscrete actions.

The mask comes with the observation (``obs["action_mask"]``, see
:mod:`rlblocks.contracts` ``has_action_mask``): :func:`observation_mask` reads it from a batch
of observation tensors. Illegal actions get the logit :data:`MASKED_LOGIT`, a large negative
*finite* number: their probability is 0 to float precision, while log-probabilities, entropies
and KL divergences stay finite (``-inf`` would give ``0 * -inf = NaN`` there). A row that
allows no action (a finished game's last observation) counts every action as legal.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlblocks.contracts import ConfigError, action_mask_of, random_legal_actions

__all__ = [
    "MASKED_LOGIT",
    "legal_actions",
    "mask_distribution",
    "mask_logits",
    "masked_argmax",
    "masked_epsilon_greedy",
    "masked_max",
    "observation_mask",
]

#: the logit (or Q-value) an illegal action gets
MASKED_LOGIT = -1e8


def observation_mask(obs: Any) -> torch.Tensor | None:
    """The action mask ``[B, A]`` (``[B, T, A]`` for windows of ``T`` steps) of a batch of
    observation tensors (a Dict observation's ``"action_mask"``), as bools; None when the
    observations carry none."""
    mask = action_mask_of(obs)
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        mask = torch.as_tensor(np.asarray(mask))
    return legal_actions(mask)


def legal_actions(mask: torch.Tensor) -> torch.Tensor:
    """``mask`` as bools ``[..., A]`` (nonzero = legal), rows that allow nothing allowing all."""
    legal = mask != 0
    return legal | ~legal.any(dim=-1, keepdim=True)


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits [B, A]`` with illegal actions set to :data:`MASKED_LOGIT` (unchanged without a
    mask). Also for Q-values before a max or argmax."""
    if mask is None:
        return logits
    if mask.dtype != torch.bool:
        mask = legal_actions(mask)
    return torch.where(mask.to(logits.device), logits, logits.new_tensor(MASKED_LOGIT))


def masked_argmax(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The best legal action ``[B]`` of ``values [B, A]`` (the plain argmax without a mask)."""
    return mask_logits(values, mask).argmax(dim=-1)


def masked_max(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The largest value ``[B]`` over legal actions (the plain max without a mask)."""
    return mask_logits(values, mask).max(dim=-1).values


def masked_epsilon_greedy(
    act: np.ndarray, eps: float, mask: Any, rng: np.random.Generator
) -> np.ndarray:
    """``act`` with each action replaced, with probability ``eps``, by a uniformly random legal
    one of its row of ``mask [B, A]`` (indices from 0)."""
    if eps <= 0.0:
        return act
    mask = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
    mask = mask.reshape(len(mask), -1)
    explore = rng.random(len(act)) < eps
    if not explore.any():
        return act
    pick = random_legal_actions(mask[explore], gym.spaces.Discrete(mask.shape[1]), rng)
    out = np.array(act, copy=True)
    out[explore] = pick
    return out


def mask_distribution(dist: Any, mask: torch.Tensor | None) -> Any:
    """``dist`` restricted to the legal actions of ``mask`` (``dist`` itself without a mask):
    :class:`~rlblocks.algo.Categorical` and :class:`~rlblocks.algo.MultiCategorical` know how
    (their ``masked``); another distribution is refused, since it would send illegal actions."""
    if mask is None:
        return dist
    masked = getattr(dist, "masked", None)
    if masked is None:
        raise ConfigError(
            f"the env masks actions and the actor's distribution {type(dist).__name__} has no "
            "masked(mask) method; return logits (or a Categorical / MultiCategorical) from the "
            "actor so that illegal actions can be masked"
        )
    return masked(mask)
