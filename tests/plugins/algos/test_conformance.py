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
