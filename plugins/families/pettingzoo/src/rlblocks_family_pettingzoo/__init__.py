"""PettingZoo's multi-agent envs for rlblocks: agent slots over PettingZoo envs, the multi-agent
collector (envs in this process, or in worker processes of subproc, shmem or ray:
:mod:`.remote`), and policy and buffer groups (one per agent group of ``env.policy_mapping``); and
two-player games seen from one seat (``games/...`` ids, :mod:`.games`): opponents, self-play.

Names are imported on first use: the entry-point spec imports this package, and listing
plugins must not import torch or PettingZoo.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_NAMES = {
    "JointAgent": "agent",
    "MultiAgentAgent": "agent",
    "BufferGroup": "multiagent",
    "JointAgentEnv": "joint",
    "JointEnvFactory": "joint",
    "MultiAgentCollector": "multiagent",
    "MultiAgentStep": "multiagent",
    "MultiAgentVectorEnv": "multiagent",
    "PolicyGroup": "multiagent",
    "SingleAgentParallelEnv": "multiagent",
    "group_agents": "multiagent",
    "is_multiagent_id": "multiagent",
    "make_multiagent_env": "multiagent",
    "multiagent_factory": "multiagent",
    "multiagent_wrappers": "multiagent",
    "AgentSlotsEnv": "remote",
    "RemoteMultiAgentVectorEnv": "remote",
    "make_remote_multiagent_env": "remote",
    "restore_object": "snapshot",
    "snapshot_object": "snapshot",
    "AgentIdObservation": "wrappers",
    "AgentIdObservationAEC": "wrappers",
    "ActionMaskFromInfo": "wrappers",
    "ActionMaskFromInfoAEC": "wrappers",
    "PettingZooFamily": "family",
    "GameEnv": "games",
    "Opponent": "games",
    "PolicySnapshot": "games",
    "RandomOpponent": "games",
    "SavedRunOpponent": "games",
    "SelfPlay": "games",
    "SelfPlayOpponent": "games",
    "game_outcome": "games",
    "make_opponent": "games",
    "play_games": "games",
}

__all__ = sorted(_NAMES)

if TYPE_CHECKING:
    from rlblocks_family_pettingzoo.agent import JointAgent, MultiAgentAgent
    from rlblocks_family_pettingzoo.family import PettingZooFamily
    from rlblocks_family_pettingzoo.games import (
        GameEnv,
        Opponent,
        PolicySnapshot,
        RandomOpponent,
        SavedRunOpponent,
        SelfPlay,
        SelfPlayOpponent,
        game_outcome,
        make_opponent,
        play_games,
    )
    from rlblocks_family_pettingzoo.joint import JointAgentEnv, JointEnvFactory
    from rlblocks_family_pettingzoo.multiagent import (
        BufferGroup,
        MultiAgentCollector,
        MultiAgentStep,
        MultiAgentVectorEnv,
        PolicyGroup,
        SingleAgentParallelEnv,
        group_agents,
        is_multiagent_id,
        make_multiagent_env,
        multiagent_factory,
        multiagent_wrappers,
    )
    from rlblocks_family_pettingzoo.remote import (
        AgentSlotsEnv,
        RemoteMultiAgentVectorEnv,
        make_remote_multiagent_env,
    )
    from rlblocks_family_pettingzoo.snapshot import restore_object, snapshot_object
    from rlblocks_family_pettingzoo.wrappers import (
        ActionMaskFromInfo,
        ActionMaskFromInfoAEC,
        AgentIdObservation,
        AgentIdObservationAEC,
    )


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
