"""The toolkit algorithm plugins share: the policy bases (``BasePolicy`` and its on-policy,
off-policy and value-based bases with their config classes), return math (GAE, n-step,
discounted returns, the value mask), the optimizer step, target networks, exploration noise,
normalisers (running, and a dataset's for offline learning), distributions, natural-gradient
helpers, CUDA-graph capture and the entropy temperature, and the intrinsic curiosity module any
online algorithm takes (``algo.intrinsic``). Networks are in :mod:`rlblocks.algo.nets`.

Builds on ``contracts`` and ``plugins`` only, so it could be its own distribution.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "ICM",
    "MASKED_LOGIT",
    "ActorCriticConfig",
    "BasePolicy",
    "Categorical",
    "ContinuousActorCriticConfig",
    "Curiosity",
    "DatasetObsNorm",
    "DeterministicActorCriticConfig",
    "DiagGaussian",
    "Distribution",
    "EntropyTemperature",
    "FiniteWatch",
    "GaussianNoise",
    "IntrinsicConfig",
    "IntrinsicRewardView",
    "MultiCategorical",
    "NetworkConfig",
    "OUNoise",
    "OffPolicyPolicy",
    "OnPolicyConfig",
    "OnPolicyPolicy",
    "OptimizerStep",
    "QLearningPolicy",
    "Rollout",
    "RunningMeanStd",
    "StepGraph",
    "TargetNetwork",
    "ValueBasedConfig",
    "ValueBasedPolicy",
    "categorical_projection",
    "conjugate_gradient",
    "cosine_features",
    "discounted_returns",
    "episodic_returns",
    "epsilon_greedy",
    "fisher_vector_product",
    "flat_grad",
    "fraction_loss",
    "gae",
    "get_flat_params",
    "graph_refusal",
    "legal_actions",
    "linear_decay",
    "make_curiosity",
    "make_noise",
    "make_optimizer",
    "mask_distribution",
    "mask_logits",
    "masked_argmax",
    "masked_epsilon_greedy",
    "masked_max",
    "nstep_return",
    "observation_mask",
    "optimizers_deferred",
    "quantile_huber_loss",
    "quantile_midpoints",
    "reverse_linear_scan",
    "set_flat_params",
    "value_loss",
    "value_mask",
    "value_network",
]

if TYPE_CHECKING:
    from rlblocks.algo._cuda_graph import StepGraph, graph_refusal
    from rlblocks.algo._distributional import (
        categorical_projection,
        cosine_features,
        fraction_loss,
        quantile_huber_loss,
        quantile_midpoints,
    )
    from rlblocks.algo._distributions import (
        Categorical,
        DiagGaussian,
        Distribution,
        MultiCategorical,
    )
    from rlblocks.algo._intrinsic import ICM, Curiosity, IntrinsicRewardView, make_curiosity
    from rlblocks.algo._intrinsic_config import IntrinsicConfig
    from rlblocks.algo._masks import (
        MASKED_LOGIT,
        legal_actions,
        mask_distribution,
        mask_logits,
        masked_argmax,
        masked_epsilon_greedy,
        masked_max,
        observation_mask,
    )
    from rlblocks.algo._natural_gradient import (
        conjugate_gradient,
        fisher_vector_product,
        flat_grad,
        get_flat_params,
        set_flat_params,
    )
    from rlblocks.algo._network_config import NetworkConfig
    from rlblocks.algo._noise import GaussianNoise, OUNoise, make_noise
    from rlblocks.algo._normalize import DatasetObsNorm, RunningMeanStd
    from rlblocks.algo._offpolicy import OffPolicyPolicy
    from rlblocks.algo._offpolicy_config import (
        ActorCriticConfig,
        ContinuousActorCriticConfig,
        DeterministicActorCriticConfig,
    )
    from rlblocks.algo._onpolicy import OnPolicyPolicy, Rollout, value_loss
    from rlblocks.algo._onpolicy_config import OnPolicyConfig
    from rlblocks.algo._optim import (
        FiniteWatch,
        OptimizerStep,
        make_optimizer,
        optimizers_deferred,
    )
    from rlblocks.algo._policy import BasePolicy
    from rlblocks.algo._returns import (
        discounted_returns,
        episodic_returns,
        gae,
        nstep_return,
        reverse_linear_scan,
        value_mask,
    )
    from rlblocks.algo._schedules import linear_decay
    from rlblocks.algo._target import TargetNetwork
    from rlblocks.algo._temperature import EntropyTemperature
    from rlblocks.algo._valuebased import (
        QLearningPolicy,
        ValueBasedPolicy,
        epsilon_greedy,
        value_network,
    )
    from rlblocks.algo._valuebased_config import ValueBasedConfig

__getattr__, __dir__ = attach(__name__, __file__)
