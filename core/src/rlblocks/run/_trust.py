"""The trust rule for the code a run directory's config names.

A run directory is data: loading, evaluating or resuming it must not run code of whoever wrote
its ``config.json``. Every import path a config can hold — the env id (``module:EnvId``), the env
wrappers, a buffer part's functions (a spec's ``import_fields``: HER's ``compute_reward``) and
``algo.encoder`` — is imported only when its module is imported already, belongs to rlblocks,
its installed plugins or gymnasium, or the user trusts the run (``trust_imports=True``,
``--trust-imports``). :func:`check_run_imports` applies the rule to a whole config, before
anything is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlblocks.contracts import ConfigError
from rlblocks.plugins import untrusted_module
from rlblocks.run._advice import option
from rlblocks.run._compose import check_env_id, spec_lookup
from rlblocks.run._networks import check_network_imports

__all__ = ["check_run_imports"]

def _refuse(field: str, path: Any, module: str) -> ConfigError:
    return ConfigError(
        f"{field}: {path!r} names code in the module {module!r}, and importing it runs that "
        f"code; import it yourself first, or pass {option('trust_imports=True', '--trust-imports')}"
        " if you trust this run"
    )


def check_run_imports(config: Any, trusted: bool, env_id: bool = True) -> None:
    """Refuse, before anything is built, every import path of a run directory's ``config`` that
    the trust rule does not allow (one line naming the field, the path and the fix). The env id
    is checked (and, trusted, imported) unless ``env_id`` is False (a factory replaces it)."""
    if env_id:
        check_env_id(config.env.id, trusted=trusted)
    if trusted:
        return
    for field in ("wrappers", "train_wrappers"):
        for item in getattr(config.env, field):
            path = item.get("path") if isinstance(item, Mapping) else item
            module = untrusted_module(str(path))
            if module is not None:
                raise _refuse(f"env.{field}", path, module)
    # options are keyed by the part's role ("relabel": HER's options); the role's field names it
    for role, options in (config.buffer.options or {}).items():
        name = getattr(config.buffer, str(role), None)
        try:
            fields = spec_lookup("buffer", str(name)).import_fields
        except Exception:  # an unknown part is reported where the buffer is built
            continue
        for field in fields:
            value = options.get(field) if isinstance(options, Mapping) else getattr(
                options, field, None
            )
            if isinstance(value, str):
                module = untrusted_module(value)
                if module is not None:
                    raise _refuse(f"buffer.{field}", value, module)
    check_network_imports(config, trusted=False)
