"""The contracts every part of rlblocks speaks: the protocols (policy, buffer and its abilities,
vector env, collector, trainer), ``Batch``, trajectory views, validators for config fields and the
error types.

The bottom layer of core: it imports no other subpackage, so anything may build on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "STORED_PREFIX",
    "ActingViews",
    "AnnealedBuffer",
    "AsyncVectorEnv",
    "AutoChosenVectorEnv",
    "Batch",
    "Buffer",
    "BufferAbilities",
    "BufferFileError",
    "CheckpointError",
    "Collector",
    "ComposedBuffer",
    "ConfigError",
    "DevicePolicy",
    "DuplicateComponentError",
    "EnvAttachedBuffer",
    "EnvWorkerError",
    "EpisodeCutBuffer",
    "FiniteWatcher",
    "FiniteWatchingPolicy",
    "InFlightCollector",
    "LayoutBuffer",
    "NamedVectorEnv",
    "NonFiniteError",
    "ObsNextRebuildingBuffer",
    "PersistentBuffer",
    "PluginLoadError",
    "Policy",
    "PolicyAbilities",
    "PrioritizedBuffer",
    "QuantizedActionPolicy",
    "RandomBuffer",
    "RelabellingBuffer",
    "RestartingVectorEnv",
    "RlblocksError",
    "SeedableBuffer",
    "SnapshotVectorEnv",
    "StackingBuffer",
    "Trainer",
    "UnknownComponentError",
    "VectorEnv",
    "VectorEnvAbilities",
    "ViewRequirement",
    "ViewingPolicy",
    "acting_requirements",
    "copy_history",
    "describe_change",
    "frame_stack_views",
    "parse_shift",
    "put_rows",
    "shifted_index",
    "space_has_tuple",
    "stored_key",
    "take_rows",
    "training_views",
    "tuples_as_dicts",
    "validators",
    "writable_dir_problem",
    "writable_file_problem",
]

if TYPE_CHECKING:
    from rlblocks.contracts import _validators as validators
    from rlblocks.contracts._arraytree import put_rows, space_has_tuple, take_rows, tuples_as_dicts
    from rlblocks.contracts._batch import Batch
    from rlblocks.contracts._errors import (
        BufferFileError,
        CheckpointError,
        ConfigError,
        DuplicateComponentError,
        EnvWorkerError,
        NonFiniteError,
        PluginLoadError,
        RlblocksError,
        UnknownComponentError,
    )
    from rlblocks.contracts._protocols import (
        AnnealedBuffer,
        AsyncVectorEnv,
        AutoChosenVectorEnv,
        Buffer,
        BufferAbilities,
        Collector,
        ComposedBuffer,
        DevicePolicy,
        EnvAttachedBuffer,
        EpisodeCutBuffer,
        FiniteWatcher,
        FiniteWatchingPolicy,
        InFlightCollector,
        LayoutBuffer,
        NamedVectorEnv,
        ObsNextRebuildingBuffer,
        PersistentBuffer,
        Policy,
        PolicyAbilities,
        PrioritizedBuffer,
        QuantizedActionPolicy,
        RandomBuffer,
        RelabellingBuffer,
        RestartingVectorEnv,
        SeedableBuffer,
        SnapshotVectorEnv,
        StackingBuffer,
        Trainer,
        VectorEnv,
        VectorEnvAbilities,
        ViewingPolicy,
    )
    from rlblocks.contracts._validators import writable_dir_problem, writable_file_problem
    from rlblocks.contracts._views import (
        STORED_PREFIX,
        ActingViews,
        ViewRequirement,
        acting_requirements,
        copy_history,
        describe_change,
        frame_stack_views,
        parse_shift,
        shifted_index,
        stored_key,
        training_views,
    )

__getattr__, __dir__ = attach(__name__, __file__)
