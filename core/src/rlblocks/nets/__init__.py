"""Network bodies and heads shared by algorithms."""

from rlblocks.nets.encoders import FlattenEncoder, obs_to_tensor
from rlblocks.nets.heads import Actor, Critic, orthogonal_init
from rlblocks.nets.mlp import MLP, QNetwork, obs_dim

__all__ = [
    "MLP",
    "Actor",
    "Critic",
    "FlattenEncoder",
    "QNetwork",
    "obs_dim",
    "obs_to_tensor",
    "orthogonal_init",
]
