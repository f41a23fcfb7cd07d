"""Entry-point spec of the HER relabeller: imports nothing heavier than attrs."""

from attrs import define, field, validators

from rlblocks.plugins import BufferSpec


@define(kw_only=True)
class HERConfig:
    """Options of the hindsight relabeller (the buffer's own options, ``size``, ``num_envs``,
    ``ignore_obs_next``..., are in the run config's buffer section)."""

    k: int = field(default=4, validator=validators.ge(0))
    """Relabelled transitions per original one: a fraction k / (k + 1) of every sampled batch
    gets a hindsight goal (4 = 80%; 0 = plain replay)."""
    strategy: str = field(default="future", validator=validators.in_(("future",)))
    """Where hindsight goals come from: "future" = the achieved goal of a uniformly chosen step
    of the same episode at or after the sampled one."""
    compute_reward: str | None = None
    """Import path ("package.module:function") of compute_reward(achieved_goal, desired_goal,
    info) -> rew, vectorised over a batch. None: pass a callable to HindsightRelabeller, or call
    buffer.attach_env(env) to use env.unwrapped.compute_reward."""
    terminate_on_success: bool = False
    """Recompute terminated for relabelled transitions with compute_terminated (for envs whose
    episodes end when the goal is reached); False keeps the stored flags."""
    compute_terminated: str | None = None
    """Import path of compute_terminated(achieved_goal, desired_goal, info) -> bool array, used
    when terminate_on_success; None: a callable, or env.unwrapped.compute_terminated via
    attach_env."""


SPEC = BufferSpec(
    name="her",
    summary="Relabeller: hindsight experience replay ('future' goals); per-env layout by default.",
    impl="rlblocks_buffer_her.buffer:HindsightRelabeller",
    config=HERConfig,
    part="relabeller",
    default_layout="vector",
    import_fields=("compute_reward", "compute_terminated"),
)
