"""GAIL's hyperparameters, each with its default and meaning. Imports only attrs (and core's
attrs-only validators and plugin registry, to check the learner's name)."""

from __future__ import annotations

from typing import Any

from attrs import define, field, validators

from rlblocks.contracts import RlblocksError
from rlblocks.contracts import validators as check
from rlblocks.plugins import get_registry


def learner_problem(name: str) -> str | None:
    """Why the algorithm registered as ``name`` cannot be GAIL's policy learner (None: it
    can): it must be installed, on-policy, single-agent, non-recurrent and learn from no
    dataset of its own."""
    registry = get_registry("algo")
    try:
        spec = registry.spec(name)
    except RlblocksError as exc:
        able = [n for n in sorted(registry.names()) if learner_problem(n) is None]
        return f"{str(exc).splitlines()[0].rstrip('.')}; on-policy algorithms: {', '.join(able)}"
    if spec.training != "on-policy":
        return f"{name!r} trains {spec.training}; GAIL's learner must be an on-policy algorithm"
    if getattr(spec, "uses_dataset", False):
        return f"{name!r} learns from a dataset itself; name a plain on-policy algorithm"
    if spec.recurrent or spec.needs_global_state:
        why = "is recurrent" if spec.recurrent else "needs a multi-agent env's global state"
        return f"{name!r} {why}, which GAIL's learner cannot be; name ppo, a2c, trpo, ..."
    return None


def _learner(_inst: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be the name of an on-policy algorithm (ppo, a2c...), got {value!r}")
    problem = learner_problem(value)
    if problem is not None:
        raise ValueError(problem)


def _learner_config(inst: Any, _attribute: Any, value: Any) -> None:
    """The learner's options must build its config (checked like a config file's)."""
    if not isinstance(value, dict) or learner_problem(inst.learner) is not None:
        return  # attrs' type check, or the learner's own error, says what is wrong
    from rlblocks.run import spec_lookup, structure_options  # only when a config is built

    config = spec_lookup("algo", inst.learner).config
    if config is None:
        if value:
            raise ValueError(f"{inst.learner!r} takes no options; leave learner_config empty")
        return
    try:
        structure_options(config, value, label=f"algo.learner_config ({inst.learner})", root="")
    except RlblocksError as exc:
        lines = [line.removeprefix(".") for line in str(exc).splitlines()]
        raise ValueError(f"{inst.learner}'s options: {'; '.join(lines)}") from None


@define(kw_only=True)
class GAILConfig:
    """Generative Adversarial Imitation Learning (Ho & Ermon, 2016, "Generative Adversarial
    Imitation Learning", NeurIPS): a discriminator ``D(s, a)`` learns to tell the expert's
    transitions (the dataset) from the policy's, and an on-policy learner maximises a reward
    that grows where ``D`` takes the policy's steps for the expert's.

    The paper's discriminator has two hidden layers of 100 tanh units and is trained with Adam,
    one step per rollout against as many expert transitions; its policy learner is TRPO. Here
    the learner is any installed on-policy algorithm, PPO (Schulman et al., 2017) by default,
    built through the registry with ``learner_config`` as its settings.
    """

    learner: str = field(default="ppo", validator=_learner)
    """The on-policy algorithm that learns the policy from the discriminator's reward (ppo,
    a2c, trpo, npg, reinforce: any installed one), built by name."""
    learner_config: dict[str, Any] = field(factory=dict, validator=_learner_config)
    """The learner's settings (its config fields: ``{"lr": 2e-3}``; ``--set
    algo.learner_config.lr=2e-3``); unset fields keep the learner's config defaults."""
    reward: str = field(default="airl", validator=check.one_of("airl", "gail"))
    """The reward the learner maximises, from the discriminator's probability ``D`` that a step
    is the expert's: ``gail``, ``-log(1 - D)`` (the paper's cost ``log D_pi``, always positive:
    on envs whose episodes end on failure it also pays for staying alive, whatever D says);
    ``airl``, ``log D - log(1 - D)``, the discriminator's logit (the reward of AIRL, Fu, Luo &
    Levine, 2018; zero where D cannot tell, so episode length earns nothing by itself)."""
    hidden_sizes: list[int] = field(factory=lambda: [100, 100], validator=check.hidden_sizes)
    """Widths of the discriminator's hidden layers (the paper's: 100, 100)."""
    activation: str = field(default="tanh", validator=check.activation)
    """Activation between the discriminator's hidden layers (the paper's: tanh)."""
    lr: float = field(default=3e-4, validator=check.positive)
    """Adam learning rate of the discriminator."""
    disc_epochs: int = field(default=1, validator=validators.ge(0))
    """Passes of the discriminator over each rollout (minibatches of ``disc_batch_size`` policy
    steps, each against as many expert steps drawn from the dataset). 0 freezes it at its start
    (an ablation), where it cannot tell any step from the expert's: the reward is then 0
    everywhere with ``airl``, ``log 2`` with ``gail``."""
    disc_batch_size: int = field(default=256, validator=validators.ge(1))
    """Policy steps (and expert steps) per discriminator minibatch."""
    max_grad_norm: float | None = field(
        default=None, validator=check.optional(check.positive, "no clipping")
    )
    """Clip the discriminator's gradient norm to this (None: no clipping)."""
    obs_norm: bool | None = None
    """Normalise the discriminator's observations with the dataset's per-feature mean and
    standard deviation (fitted when the dataset is given, saved with the weights). None: on for
    vector Box observations, off for images; True refuses observations it cannot normalise."""
    obs_norm_eps: float = field(default=1e-3, validator=check.positive)
    """Added to the standard deviation before dividing: ``(s - mean) / (std + eps)``."""
    images: str = field(default="cnn", validator=validators.in_(["cnn", "flatten"]))
    """Image observations reach the discriminator through a Nature-DQN CNN, or flattened."""
