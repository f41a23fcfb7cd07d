"""Specs of core's own buffer parts, registered through entry points like any plugin's."""

from attrs import define, field, validators

from rlblocks.plugins import BufferSpec

REPLAY = BufferSpec(
    name="replay",
    summary="Layout: one circular storage shared by all envs, with stored episode links.",
    impl="rlblocks.replay:SharedRing",
    part="layout",
)


UNIFORM = BufferSpec(
    name="uniform",
    summary="Sampler: every valid transition equally likely (the default).",
    impl="rlblocks.replay:UniformSampler",
    part="sampler",
)


@define(kw_only=True)
class SequenceConfig:
    """Options of the sequence sampler."""

    length: int = field(default=16, validator=validators.ge(1))
    """Steps per window; windows stop at episode ends (the rest is masked)."""
    start: str = field(default="any", validator=validators.in_(("any", "episode")))
    """Where windows start: "any" valid step, or only an "episode"'s first stored step."""
    burn_in: int = field(default=0, validator=validators.ge(0))
    """Steps before each window that warm a recurrent state up; learn_mask leaves them out."""


SEQUENCE = BufferSpec(
    name="sequence",
    summary="Sampler: fixed-length windows inside episodes with a mask (recurrent learners).",
    impl="rlblocks.replay:SequenceSampler",
    part="sampler",
    config=SequenceConfig,
)
