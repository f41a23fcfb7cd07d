"""Network bodies, encoders and heads shared by algorithms."""

from rlblocks.nets.actors import DeterministicActor, SquashedGaussianActor
from rlblocks.nets.critics import EnsembleLinear, EnsembleMLP, QEnsemble
from rlblocks.nets.encoders import (
    FlattenEncoder,
    ImageEncoder,
    ObsEncoder,
    is_image_space,
    make_encoder,
    obs_to_tensor,
)
from rlblocks.nets.heads import Actor, Critic, orthogonal_init
from rlblocks.nets.mlp import MLP, QNetwork, obs_dim
from rlblocks.nets.recurrent import RecurrentBody, detach_state

__all__ = [
    "MLP",
    "Actor",
    "Critic",
    "DeterministicActor",
    "EnsembleLinear",
    "EnsembleMLP",
    "FlattenEncoder",
    "ImageEncoder",
    "ObsEncoder",
    "QEnsemble",
    "QNetwork",
    "RecurrentBody",
    "SquashedGaussianActor",
    "detach_state",
    "is_image_space",
    "make_encoder",
    "obs_dim",
    "obs_to_tensor",
    "orthogonal_init",
]
