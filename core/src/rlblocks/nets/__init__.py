"""Network bodies and heads shared by algorithms."""

from rlblocks.nets.mlp import MLP, QNetwork, obs_dim

__all__ = ["MLP", "QNetwork", "obs_dim"]
