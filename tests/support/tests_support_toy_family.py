"""A toy env family, as a third party would write one: ids ``toy:<gymnasium id>`` run that
gymnasium env through core's own vector envs and collectors. It records what it was asked, so
a test can see that core gave the run to the family."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import rlblocks
from rlblocks.collect import Collector
from rlblocks.contracts import ConfigError
from rlblocks.run import FamilyBuild, FamilyParts

CALLS: list[tuple[str, Any]] = []


class ToyFamily:
    def check_env_id(self, env_id: str, trusted: bool = True) -> None:
        CALLS.append(("check_env_id", env_id))
        if not env_id.startswith("toy:"):
            raise ConfigError(f"{env_id!r} is no toy id")

    def build(self, run: FamilyBuild) -> FamilyParts:
        CALLS.append(("build", run.config.env.id))
        gym_id = run.config.env.id.partition(":")[2]
        train = rlblocks.make_vector_env("dummy", gym_id, run.config.env.num_envs)
        test = rlblocks.make_vector_env("dummy", gym_id, run.config.env.num_test_envs)
        policy = run.make_policy(train.observation_space, train.action_space)
        policy.seed(run.seed)
        buffer = run.make_buffer(run.config.env.num_envs)
        return FamilyParts(
            train_envs=train,
            test_envs=test,
            policy=policy,
            buffer=buffer,
            train_collector=Collector(policy, train, buffer, seed=run.seed),
            test_collector=Collector(policy, test, None, exploration=False, seed=run.seed + 1),
        )

    def probe_envs(self, env_fns: Sequence[Callable[[], Any]]) -> Any:
        return rlblocks.make_vector_env("dummy", list(env_fns))

    def collector(self, policy: Any, envs: Any, buffer: Any, seed: int = 0) -> Collector:
        return Collector(policy, envs, buffer, seed=seed)
