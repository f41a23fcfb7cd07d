"""Every ``rlblocks train`` command shown in the docs and the READMEs resolves to a valid config.

A command is read from the shell blocks of the pages (```bash, ```sh, ```console or a bare
fence), parsed by the real command line's parser and resolved the way ``rlblocks train`` resolves
it (section defaults, the algorithm's presets for the env, then the flags and ``--set``
overrides), without training. A misspelt ``--set`` field, an option of the wrong section or an
unknown plugin name in a documented command fails here instead of in a reader's terminal.
Commands that need a config file (``--config``) or another run (``--init-from``), or show a
placeholder (``ALGO``, ``<...>``), are skipped.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^[ \t]*```(?P<info>[^\n`]*)\n(?P<body>.*?)^[ \t]*```[ \t]*$", re.M | re.S)
_SHELL = {"", "bash", "sh", "shell", "console"}


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    pages += sorted(ROOT.glob("plugins/*/*/README.md"))
    pages += sorted((ROOT / "contrib").rglob("*.md"))
    return [p for p in pages if p.is_file() and "benchmarks" not in p.relative_to(ROOT).parts[:2]]


def documented_train_commands() -> list[tuple[str, str]]:
    """``(where, command)`` for every ``rlblocks train`` line of a shell block."""
    found = []
    for page in _pages():
        text = page.read_text("utf-8")
        for match in _FENCE.finditer(text):
            if match.group("info").strip().split(" ")[0] not in _SHELL:
                continue
            body = match.group("body").replace("\\\n", " ")
            first = text.count("\n", 0, match.start()) + 2
            for k, line in enumerate(body.splitlines()):
                line = line.strip().removeprefix("$ ").split(" #")[0].strip()
                if line.startswith("rlblocks train "):
                    found.append((f"{page.relative_to(ROOT)}:{first + k}", line))
    return found


COMMANDS = documented_train_commands()


def test_the_docs_show_train_commands_to_check() -> None:
    # the scan itself can fail: the README's quick start and the backend READMEs have some
    assert len(COMMANDS) >= 5, COMMANDS


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_train_command_resolves(where: str, command: str) -> None:
    from rlblocks.cli import build_parser, train_settings
    from rlblocks.run import _config as cfg
    from rlblocks.run import resolve_train_config

    argv = shlex.split(command)[1:]
    if "--config" in argv or "--init-from" in argv or any(
        a.isupper() or "<" in a for a in argv[:2]
    ):
        pytest.skip("needs a config file or another run, or shows a placeholder")
    args = build_parser().parse_args(argv)
    resolved = resolve_train_config(
        args.algo, seed=args.seed, run_dir=args.run_dir, **train_settings(args)
    )
    assert resolved.algo_name == args.algo, where
    for override in args.set or ():
        path, value = cfg.parse_override(override)
        assert value in _values(resolved, path), f"{where}: {override} did not reach the config"


def _values(node: object, path: tuple[str, ...]) -> list[object]:
    """What ``path`` reads in a resolved config: a plugin's own options sit one level down, in
    the section's ``options`` (the backend's config, or the buffer parts' configs by part)."""
    if not path:
        return [node]
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        if head in node:
            return _values(node[head], rest)
        return [v for part in node.values() for v in _values(part, path)]
    if hasattr(node, head):
        return _values(getattr(node, head), rest)
    if hasattr(node, "options"):
        return _values(node.options, path)
    return []
