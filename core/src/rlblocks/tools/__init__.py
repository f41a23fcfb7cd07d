"""What the command line uses on finished runs: readable descriptions of runs and algorithms,
learning-curve plots, multi-seed statistics and hyperparameter tuning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "bootstrap_band",
    "check_space",
    "default_space",
    "describe_algo",
    "describe_run",
    "describe_runs",
    "exit_status",
    "few_seeds_note",
    "field_docs",
    "find_runs",
    "format_summary",
    "group_runs",
    "iqm",
    "learning_curve",
    "parse_param",
    "parse_seeds",
    "plot_runs",
    "stratified_bootstrap",
    "summarize",
    "train_seeds",
    "tune",
    "write_toml_config",
]

if TYPE_CHECKING:
    from rlblocks.tools._inspect import (
        bootstrap_band,
        describe_algo,
        describe_run,
        describe_runs,
        field_docs,
        find_runs,
        group_runs,
        learning_curve,
        plot_runs,
    )
    from rlblocks.tools._seeds import (
        exit_status,
        format_summary,
        parse_seeds,
        summarize,
        train_seeds,
    )
    from rlblocks.tools._stats import few_seeds_note, iqm, stratified_bootstrap
    from rlblocks.tools._tuning import (
        check_space,
        default_space,
        parse_param,
        tune,
        write_toml_config,
    )

__getattr__, __dir__ = attach(__name__, __file__)
