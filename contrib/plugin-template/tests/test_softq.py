"""The template's own tests: the conformance kit and training to a threshold."""

import pytest

import rlblocks
from rlblocks.testing import check_algorithm


def test_softq_conforms() -> None:
    check_algorithm("softq")


@pytest.mark.slow
def test_softq_learns_cartpole(tmp_path) -> None:
    result = rlblocks.train(
        "softq", seed=0, stop_reward=475, loggers=[], progress=False, run_dir=tmp_path / "run"
    )
    assert result.solved, result
