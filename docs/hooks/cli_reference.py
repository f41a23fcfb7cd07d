"""MkDocs hook: the command-line reference in ``cli.md``, generated from the argparse parsers.

``cli.md`` holds the marker ``<!-- cli-reference -->``; at build time it is replaced by the
``--help`` text of ``rlblocks`` and of every subcommand, found by walking the parser's subparsers
actions, so a subcommand added to ``rlblocks.cli.build_parser`` appears without touching the docs.
Help is formatted at a fixed width so the page does not depend on the terminal that builds it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- cli-reference -->"
PAGE = "cli.md"
WIDTH = "100"


@contextlib.contextmanager
def _fixed_width() -> Iterator[None]:
    # argparse sizes its help from COLUMNS (through shutil.get_terminal_size)
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(summary, parser)`` of each subcommand, depth first, once each (aliases skipped)."""
    seen: set[int] = set()
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        summaries = {a.dest: a.help or "" for a in action._choices_actions}
        for name, sub in action.choices.items():
            if id(sub) in seen:
                continue
            seen.add(id(sub))
            yield summaries.get(name, ""), sub
            yield from _subcommands(sub)


def _section(title: str, summary: str, parser: argparse.ArgumentParser, level: int) -> str:
    lines = [f"{'#' * level} `{title}`", ""]
    if summary:
        lines += [summary[:1].upper() + summary[1:] + ".", ""]
    lines += ["```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def cli_reference() -> str:
    """Markdown for the top-level command and every subcommand."""
    from rlblocks.cli import build_parser

    with _fixed_width():
        parser = build_parser()
        parts = [_section(parser.prog, "", parser, 2)]
        for summary, sub in _subcommands(parser):
            parts.append(_section(sub.prog, summary, sub, 2))
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: fill the marker of ``cli.md``; other pages pass through."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} marker: the CLI reference has nowhere to go")
    return markdown.replace(MARKER, cli_reference())
