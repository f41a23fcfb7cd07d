"""How an error message names an option: as the ``rlblocks`` command's flag (``--overwrite``)
while a command runs, else as the Python argument (``overwrite=True``).

Functions shared by the command line and the Python API raise the same errors; a message that
tells the reader what to pass must speak the language they typed. The command line marks its
commands with :func:`command_line`; the mark is an environment variable, so the processes a
command starts (``train --seeds`` workers) speak its language too. Standard library only:
``rlblocks list`` imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Iterator, Sequence

_VARIABLE = "RLBLOCKS_COMMAND"
#: the running command's arguments (JSON), so a message can show the exact command to run again
_ARGV = "RLBLOCKS_ARGV"


@contextlib.contextmanager
def command_line(command: str, argv: Sequence[str] | None = None) -> Iterator[None]:
    """Inside, messages name command-line flags: ``command`` (``train``, ``eval``...) runs,
    with the arguments ``argv`` (after ``rlblocks``) when given."""
    old = {name: os.environ.get(name) for name in (_VARIABLE, _ARGV)}
    os.environ[_VARIABLE] = command
    if argv is not None:
        os.environ[_ARGV] = json.dumps([str(a) for a in argv])
    else:
        os.environ.pop(_ARGV, None)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def again_with(flag: str) -> str | None:
    """The running command again with ``flag`` added, shell-quoted (``rlblocks eval 'my
    runs/x' --trust-imports``), or None outside the command line or without its arguments."""
    raw = os.environ.get(_ARGV)
    if not current_command() or not raw:
        return None
    try:
        argv = [str(a) for a in json.loads(raw)]
    except (ValueError, TypeError):
        return None
    if flag not in argv:
        argv.append(flag)
    return shlex.join(["rlblocks", *argv])


def trust_advice(module: str) -> str:
    """How to go on past a refused import of ``module`` that a run's config names: from Python,
    import it first or pass ``trust_imports=True``; from the command line (where nothing can
    be imported first), the exact command again with ``--trust-imports``."""
    if current_command():
        again = again_with("--trust-imports")
        how = f": {again}" if again else " (add --trust-imports to the command)"
        return f"if you trust this run, run the command again with --trust-imports{how}"
    return (
        f"import {module} yourself first, or pass trust_imports=True if you trust this run"
    )


def current_command() -> str | None:
    """The ``rlblocks`` command running in this process (or its parent), or None from Python."""
    return os.environ.get(_VARIABLE) or None


def option(python: str, cli: str) -> str:
    """``cli`` (a flag: ``--which latest``) under the command line, else ``python``
    (``which='latest'``)."""
    return cli if current_command() else python
