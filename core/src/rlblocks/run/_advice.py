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
import os
from collections.abc import Iterator

_VARIABLE = "RLBLOCKS_COMMAND"


@contextlib.contextmanager
def command_line(command: str) -> Iterator[None]:
    """Inside, messages name command-line flags: ``command`` (``train``, ``eval``...) runs."""
    old = os.environ.get(_VARIABLE)
    os.environ[_VARIABLE] = command
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(_VARIABLE, None)
        else:
            os.environ[_VARIABLE] = old


def current_command() -> str | None:
    """The ``rlblocks`` command running in this process (or its parent), or None from Python."""
    return os.environ.get(_VARIABLE) or None


def option(python: str, cli: str) -> str:
    """``cli`` (a flag: ``--which latest``) under the command line, else ``python``
    (``which='latest'``)."""
    return cli if current_command() else python
