"""Entry-point spec of the prioritized buffer: imports nothing heavier than attrs (and core's
attrs-only validators)."""

from attrs import define, field, validators

from rlblocks.contracts import validators as check
from rlblocks.plugins import BufferSpec


@define(kw_only=True)
class PrioritizedConfig:
    """Options of the prioritized sampler (the buffer section holds size, storage, stack_num...)."""

    alpha: float = field(default=0.6, validator=check.non_negative)
    """Prioritisation exponent: P(i) is proportional to priority**alpha (0 = uniform)."""
    beta: float = field(default=0.4, validator=check.unit_interval)
    """Importance-sampling exponent at the start of training (1 = full bias correction)."""
    beta_final: float = field(default=1.0, validator=check.unit_interval)
    """Value beta is annealed to."""
    beta_anneal_steps: int = field(default=0, validator=validators.ge(0))
    """Env steps over which beta goes linearly from beta to beta_final (0 = keep beta)."""
    eps: float = field(default=1e-6, validator=check.positive)
    """Added to |td_error| so that no transition has priority 0."""


SPEC = BufferSpec(
    name="prioritized",
    summary="Sampler: proportional prioritized replay (alpha, annealed beta, importance weights).",
    impl="rlblocks_buffer_prioritized.buffer:PrioritizedSampler",
    config=PrioritizedConfig,
    part="sampler",
    default_layout="vector",
)
