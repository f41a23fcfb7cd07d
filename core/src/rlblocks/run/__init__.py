"""Runs: configs (attrs classes and their converter), composition by name (``make_*``), the
experiment that builds and trains a run, checkpoints and run directories, the trained agent
(``load``), datasets (reading rlblocks and Minari datasets, ``collect_dataset``), the ``auto``
backend, env families and rlblocks' own envs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "ATARI_ENVS",
    "DEFAULT_LOGGERS",
    "DISCARDED_PREFIX",
    "MASKED_CARTPOLE_ID",
    "MUJOCO_ENVS",
    "REPLACED_DIR",
    "RESULT_FILE",
    "TESTS_FILE",
    "Agent",
    "BufferConfig",
    "CollectedDataset",
    "EnvConfig",
    "EnvFamily",
    "EpisodicLife",
    "EvalResult",
    "Experiment",
    "ExperimentConfig",
    "FamilyBuild",
    "FamilyParts",
    "FireReset",
    "GenerationStore",
    "LoadedDataset",
    "MaskedCartPole",
    "RunConfig",
    "RunDirLock",
    "TestRecorder",
    "TrainerConfig",
    "atari100k_config",
    "atari_env_config",
    "atari_presets",
    "atomic_write",
    "build_config",
    "check_env_id",
    "check_env_spaces",
    "check_file",
    "choose_backend",
    "collect_dataset",
    "command_line",
    "current_command",
    "dataset_metadata",
    "default_run_dir",
    "env_family",
    "env_spaces",
    "env_spec",
    "for_mujoco",
    "installed_default_loggers",
    "latest_checkpoint",
    "load",
    "load_checkpoint",
    "load_config_file",
    "load_dataset",
    "make_atari",
    "make_auto_vector_env",
    "make_buffer",
    "make_env_fns",
    "make_policy",
    "make_vector_env",
    "measure_env",
    "measure_vector_env",
    "option",
    "parse_override",
    "preflight",
    "read_config",
    "read_result",
    "read_tests",
    "refuse_existing_run",
    "replaced_run_note",
    "resolve_device",
    "resolve_train_config",
    "resume",
    "run_label",
    "save_checkpoint",
    "seed_everything",
    "spec_lookup",
    "stacked_space",
    "structure_options",
    "to_dict",
    "train",
    "trust_problems",
    "verify_run",
    "write_config",
    "write_json",
]

if TYPE_CHECKING:
    from rlblocks.run._advice import command_line, current_command, option
    from rlblocks.run._agent import Agent, EvalResult, load
    from rlblocks.run._atari import EpisodicLife, FireReset, make_atari
    from rlblocks.run._auto_backend import (
        choose_backend,
        make_auto_vector_env,
        measure_env,
        measure_vector_env,
    )
    from rlblocks.run._checkpoint import (
        GenerationStore,
        atomic_write,
        check_file,
        latest_checkpoint,
        load_checkpoint,
        save_checkpoint,
        write_json,
    )
    from rlblocks.run._collect_data import CollectedDataset, collect_dataset
    from rlblocks.run._compose import (
        check_env_id,
        check_env_spaces,
        env_spaces,
        env_spec,
        installed_default_loggers,
        make_buffer,
        make_env_fns,
        make_policy,
        make_vector_env,
        preflight,
        resolve_device,
        spec_lookup,
        stacked_space,
    )
    from rlblocks.run._config import (
        build_config,
        load_config_file,
        parse_override,
        read_config,
        structure_options,
        to_dict,
        write_config,
    )
    from rlblocks.run._config_sections import (
        DEFAULT_LOGGERS,
        BufferConfig,
        EnvConfig,
        ExperimentConfig,
        RunConfig,
        TrainerConfig,
    )
    from rlblocks.run._dataset import LoadedDataset, dataset_metadata, load_dataset
    from rlblocks.run._env_families import (
        ATARI_ENVS,
        MUJOCO_ENVS,
        atari100k_config,
        atari_env_config,
        atari_presets,
        for_mujoco,
    )
    from rlblocks.run._envs import MASKED_CARTPOLE_ID, MaskedCartPole
    from rlblocks.run._experiment import Experiment
    from rlblocks.run._family import EnvFamily, FamilyBuild, FamilyParts, env_family
    from rlblocks.run._rundir import (
        DISCARDED_PREFIX,
        REPLACED_DIR,
        RESULT_FILE,
        TESTS_FILE,
        RunDirLock,
        TestRecorder,
        default_run_dir,
        read_result,
        read_tests,
        refuse_existing_run,
        replaced_run_note,
        run_label,
        verify_run,
    )
    from rlblocks.run._seeding import seed_everything
    from rlblocks.run._train import resolve_train_config, resume, train
    from rlblocks.run._trust import trust_problems

__getattr__, __dir__ = attach(__name__, __file__)
