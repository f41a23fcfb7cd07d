"""Discrete CQL's hyperparameters, each with its default and meaning. Imports only attrs (and
QR-DQN's attrs-only config)."""

from __future__ import annotations

from attrs import define, field

from rlblocks.contracts import validators as check
from rlblocks_algo_qrdqn.config import QRDQNConfig


@define(kw_only=True)
class DiscreteCQLConfig(QRDQNConfig):
    """Conservative Q-Learning for discrete actions (Kumar, Zhou, Tucker & Levine, 2020,
    "Conservative Q-Learning for Offline Reinforcement Learning", NeurIPS; its Atari
    experiments): QR-DQN's fields plus the weight of the conservative penalty.

    The penalty weight's default, 10, is the one Tianshou's discrete CQL and its Atari example
    (``examples/offline/atari_cql.py``: 200 quantiles, Adam at 1e-4, one-step targets, target
    network every 500 steps, batch 32) use; the rest are QR-DQN's defaults.
    """

    alpha_cql: float = field(default=10.0, validator=check.non_negative)
    """Weight of the conservative penalty ``mean[log sum_a exp Q(s, a) - Q(s, a_data)]`` in
    the loss. 0 turns CQL off: QR-DQN trained offline, which overestimates the actions the
    dataset never took."""
