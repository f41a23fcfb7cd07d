"""The conformance kit's action-mask check catches an algorithm that declares action_masks and
sends masked actions, and one that accepts a masked env without declaring it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlblocks.plugins import AlgoSpec
from rlblocks.testing import check_algorithm


@pytest.mark.parametrize(
    ("impl", "config", "training"),
    [
        ("MaskBlindDQN", "rlblocks_algo_dqn.config:DQNConfig", "off-policy"),
        ("MaskBlindPPO", "rlblocks_algo_ppo.config:PPOConfig", "on-policy"),
    ],
)
def test_kit_catches_masked_actions(
    impl: str, config: str, training: str, rlblocks_add_plugin, monkeypatch
) -> None:
    from rlblocks.plugins import import_object

    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "support"))
    rlblocks_add_plugin(
        AlgoSpec(
            name="maskblind",
            summary="ignores action masks",
            impl=f"tests_support_maskblind:{impl}",
            config=import_object(config),
            observation_spaces=("Box", "Dict"),
            action_spaces=("Discrete",),
            training=training,
            action_masks=True,
        )
    )
    with pytest.raises(AssertionError, match="the env got the masked action"):
        check_algorithm("maskblind")


def test_kit_catches_an_algorithm_that_accepts_masks_undeclared(
    rlblocks_add_plugin, monkeypatch
) -> None:
    import rlblocks.testing.algo_checks as kit
    from rlblocks_algo_dqn.config import DQNConfig

    rlblocks_add_plugin(
        AlgoSpec(
            name="undeclared",
            summary="masks without saying so",
            impl="rlblocks_algo_dqn.dqn:DQNPolicy",
            config=DQNConfig,
            observation_spaces=("Box", "Dict"),
            action_spaces=("Discrete",),
        )
    )
    # as if core let it through: make_policy does not refuse the masked env
    monkeypatch.setattr("rlblocks.run._compose._check_spaces", lambda *a, **k: None)
    with pytest.raises(AssertionError, match="does not say action_masks"):
        kit._check_masks_refused("undeclared", kit.START_SPACES["Discrete"][0])
