"""Every installed algorithm passes the algorithm conformance kit of rlblocks.testing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlblocks.plugins import get_registry
from rlblocks.testing import check_algorithm

ALGOS = sorted(e.name for e in get_registry("algo").entries())


def test_first_party_algorithms_are_installed() -> None:
    assert {"dqn", "ppo", "a2c", "reinforce", "npg", "trpo"} <= set(ALGOS)


@pytest.mark.parametrize("name", ALGOS)
def test_algorithm_conforms(name: str) -> None:
    check_algorithm(name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ALGOS)
def test_algorithm_conforms_on_cuda(name: str) -> None:
    # --device cuda must work for every algorithm: acting, collecting, an update, checkpoints
    check_algorithm(name, device="cuda")


def test_kit_catches_a_policy_that_forgets_its_weights(rlblocks_add_plugin, monkeypatch) -> None:
    from rlblocks.plugins import AlgoSpec
    from rlblocks_algo_dqn.config import DQNConfig

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "support"))
    rlblocks_add_plugin(
        AlgoSpec(
            name="amnesiac",
            summary="drops its weights on load",
            impl="tests_support_amnesiac:AmnesiacDQN",
            config=DQNConfig,
            observation_spaces=("Box",),
            action_spaces=("Discrete",),
        )
    )
    with pytest.raises(AssertionError, match="acts differently"):
        check_algorithm("amnesiac")


@pytest.mark.parametrize(
    ("impl", "config", "said"),
    [
        # PPO before discrete starts were mapped: Discrete(3, start=-1) got 0, 1, 2
        ("IndexSendingPPO", "rlblocks_algo_ppo.config:PPOConfig",
         r"start=-1\), greedy: map_action gave [02], outside Discrete\(3, start=-1\)"),
        ("StartTwiceDQN", "rlblocks_algo_dqn.config:DQNConfig",
         r"start=-1\), (greedy: map_action gave|.*: the env got the action) -2, outside "
         r"Discrete\(3, start=-1\)"),
        ("WarmUpInEnvUnitsDQN", "rlblocks_algo_dqn.config:DQNConfig",
         r"start=-1\), random warm-up: the stored action (-1|0|1) maps to (-2|-1|0) but the "
         r"env got (-1|0|1);"),
    ],
)  # fmt: skip
def test_kit_catches_actions_outside_a_space_with_a_start(
    impl: str, config: str, said: str, rlblocks_add_plugin, monkeypatch
) -> None:
    import importlib

    from rlblocks.plugins import AlgoSpec

    module, cls = config.split(":")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "support"))
    on_policy = "PPO" in impl
    rlblocks_add_plugin(
        AlgoSpec(
            name="startless",
            summary="gets a discrete space's start wrong",
            impl=f"tests_support_startless:{impl}",
            config=getattr(importlib.import_module(module), cls),
            observation_spaces=("Box",),
            action_spaces=("Discrete",),
            training="on-policy" if on_policy else "off-policy",
            defaults={} if on_policy else {"trainer": {"warmup_steps": 100}},
        )
    )
    with pytest.raises(AssertionError, match=said):
        check_algorithm("startless")
