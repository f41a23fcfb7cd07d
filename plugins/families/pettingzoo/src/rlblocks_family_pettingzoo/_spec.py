"""Entry-point spec of the PettingZoo env family: imports nothing heavier than attrs."""

from rlblocks.plugins import EnvFamilySpec
from rlblocks_family_pettingzoo.constructors import CONSTRUCTORS

SPEC = EnvFamilySpec(
    name="pettingzoo",
    summary="PettingZoo multi-agent envs (parallel and AEC): agent slots, one policy or one per "
    "agent group.",
    impl="rlblocks_family_pettingzoo.family:PettingZooFamily",
    env_ids=tuple(f"*:{ctor}" for ctor in CONSTRUCTORS),
    provides_global_state=True,
    loadable=True,
)
