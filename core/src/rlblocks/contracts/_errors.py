"""rlblocks' own exception types. Every message says what went wrong and what to do about it."""

from __future__ import annotations


class RlblocksError(Exception):
    """Base class of every error rlblocks raises on purpose."""


class UnknownComponentError(RlblocksError, LookupError):
    """A component name that no installed plugin provides."""


class DuplicateComponentError(RlblocksError):
    """Two distributions register the same name in one group."""


class PluginLoadError(RlblocksError, ImportError):
    """A plugin's spec or implementation failed to import."""


class ConfigError(RlblocksError, ValueError):
    """A config value, key or file is invalid; the message names the field path (``$.algo.lr``)."""


class EnvWorkerError(RlblocksError, RuntimeError):
    """An env raised or its worker died; the message names the env id."""


class CheckpointError(RlblocksError):
    """A checkpoint or run directory cannot be read or written."""


class NonFiniteError(RlblocksError, ArithmeticError):
    """A NaN or infinite value where training needs finite ones: a loss, a gradient or a
    parameter (the message names it, the gradient step and env step, and the last good
    checkpoint), or an env's observation or reward (the message names the env and its index)."""


class BufferFileError(CheckpointError, ValueError):
    """A replay buffer's file (hdf5 or memory-mapped storage) is damaged, truncated, or does not
    belong to the buffer opening it."""
