"""Env families: the extension point through which a plugin gives runs on the env ids it claims
their envs, policies, buffers and collectors (PettingZoo's multi-agent envs come this way)."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlblocks
from rlblocks.contracts import ConfigError
from rlblocks.plugins import EnvFamilySpec
from rlblocks.run import EnvFamily, env_family


@pytest.fixture
def toy_family(monkeypatch: pytest.MonkeyPatch, rlblocks_add_plugin):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "support"))
    import tests_support_toy_family as toy

    toy.CALLS.clear()
    rlblocks_add_plugin(
        EnvFamilySpec(
            name="toy",
            summary="Toy envs: a gymnasium id behind 'toy:'.",
            impl="tests_support_toy_family:ToyFamily",
            env_ids=("toy:*",),
        )
    )
    return toy


def test_a_family_claims_its_ids_by_pattern_and_leaves_the_rest(toy_family):
    spec, family = env_family("toy:CartPole-v1")
    assert spec.name == "toy" and isinstance(family, EnvFamily)
    assert env_family("CartPole-v1") is None
    assert env_family(None) is None


def test_a_run_on_a_claimed_id_is_built_by_the_family_and_trains(toy_family, tmp_path):
    result = rlblocks.train(
        "dqn", env="toy:CartPole-v1", seed=0, run_dir=tmp_path / "run", loggers=[],
        progress=False, max_env_steps=300, stop_reward=1e9,
        overrides=["trainer.warmup_steps=100", "trainer.test_episodes=2"],
    )  # fmt: skip
    assert toy_family.CALLS == [("build", "toy:CartPole-v1")]
    assert result.env_steps >= 300 and result.gradient_steps > 0
    assert (tmp_path / "run" / "result.json").is_file()


def test_what_a_family_does_not_support_is_refused_naming_the_family(toy_family, tmp_path):
    with pytest.raises(ConfigError, match=r"'toy' family .*collected synchronously"):
        rlblocks.train(
            "dqn", env="toy:CartPole-v1", seed=0, run_dir=None, loggers=[], progress=False,
            max_env_steps=5000, overrides=["trainer.async_collect=true"],
        )  # fmt: skip


def test_env_id_checks_go_to_the_family_that_claims_the_id(toy_family):
    from rlblocks.run import check_env_id

    check_env_id("toy:CartPole-v1", trusted=False)
    assert toy_family.CALLS == [("check_env_id", "toy:CartPole-v1")]


def test_rlblocks_load_refuses_a_run_of_a_family_that_cannot_be_loaded(toy_family, tmp_path):
    rlblocks.train(
        "dqn", env="toy:CartPole-v1", seed=0, run_dir=tmp_path / "run", loggers=[],
        progress=False, max_env_steps=200, stop_reward=1e9,
        overrides=["trainer.warmup_steps=100", "trainer.test_episodes=1"],
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"env of the 'toy' family .*does not load its runs"):
        rlblocks.load(tmp_path / "run")


def test_a_family_spec_must_claim_some_ids():
    with pytest.raises(ValueError, match="env_ids"):
        EnvFamilySpec(name="x", summary="s", impl="a.b:C")
