"""Network bodies, encoders and heads shared by algorithms: one observation encoder for every
gymnasium space, MLP / CNN / recurrent bodies, actor and critic heads, ensembles, noisy and
distributional Q networks; and the parts a user brings (``NetworkPart``), built, checked and
adapted once when a policy is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "MLP",
    "NETWORKS",
    "SIMBA_DEFAULTS",
    "Actor",
    "AtomQNetwork",
    "CategoricalActor",
    "Critic",
    "DeterministicActor",
    "EnsembleLinear",
    "EnsembleMLP",
    "FlattenEncoder",
    "FractionProposal",
    "GaussianActor",
    "ImageEncoder",
    "ImplicitQuantileNetwork",
    "ModuleEnsemble",
    "NetworkPart",
    "NoisyLinear",
    "ObsEncoder",
    "QEnsemble",
    "QNetwork",
    "RSNorm",
    "RecurrentBody",
    "RunningMeanStd",
    "SimbaBlock",
    "SimbaEncoder",
    "SimbaMLP",
    "SquashedGaussianActor",
    "State",
    "TupleOutput",
    "activation_class",
    "build_part",
    "check_output",
    "describe_part",
    "detach_state",
    "encoder_part",
    "fresh_copy",
    "is_image_space",
    "make_encoder",
    "network_body",
    "noisy_mlp",
    "obs_dim",
    "obs_to_tensor",
    "orthogonal_init",
    "part_device",
    "reset_noise",
    "sample_observations",
    "simba_encoder",
    "simba_size",
]

if TYPE_CHECKING:
    from rlblocks.algo.nets._actors import (
        CategoricalActor,
        DeterministicActor,
        GaussianActor,
        SquashedGaussianActor,
    )
    from rlblocks.algo.nets._critics import (
        EnsembleLinear,
        EnsembleMLP,
        ModuleEnsemble,
        QEnsemble,
    )
    from rlblocks.algo.nets._encoders import (
        FlattenEncoder,
        ImageEncoder,
        ObsEncoder,
        is_image_space,
        make_encoder,
        obs_to_tensor,
    )
    from rlblocks.algo.nets._heads import Actor, Critic, orthogonal_init
    from rlblocks.algo.nets._mlp import MLP, QNetwork, activation_class, network_body, obs_dim
    from rlblocks.algo.nets._noisy import NoisyLinear, noisy_mlp, reset_noise
    from rlblocks.algo.nets._parts import (
        NetworkPart,
        TupleOutput,
        build_part,
        check_output,
        describe_part,
        encoder_part,
        fresh_copy,
        part_device,
        sample_observations,
    )
    from rlblocks.algo.nets._qdist import AtomQNetwork, FractionProposal, ImplicitQuantileNetwork
    from rlblocks.algo.nets._recurrent import RecurrentBody, State, detach_state
    from rlblocks.algo.nets._running import RunningMeanStd
    from rlblocks.algo.nets._simba import (
        NETWORKS,
        SIMBA_DEFAULTS,
        RSNorm,
        SimbaBlock,
        SimbaEncoder,
        SimbaMLP,
        simba_encoder,
        simba_size,
    )

__getattr__, __dir__ = attach(__name__, __file__)
