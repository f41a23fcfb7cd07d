"""MkDocs hook: the list of benchmark result pages in ``benchmarks/index.md``.

The pages under ``docs/benchmarks/`` are written by the scripts in ``contrib/benchmarks/`` (some
while a long run is still going), so the index does not name them by hand: the marker
``<!-- benchmark-pages -->`` becomes a table of every page present, with its title (its first
heading) and the scripts it names as its source. A page that a run has not written yet is simply
not listed, instead of being a broken link.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

MARKER = "<!-- benchmark-pages -->"
PAGE = "benchmarks/index.md"
_SCRIPT = re.compile(r"contrib/benchmarks/[\w-]+\.py")
_TITLE = re.compile(r"^#\s+(.+?)\s*$", re.MULTILINE)


def benchmark_rows(pages: list[tuple[str, str]]) -> str:
    """Markdown table of ``(path relative to benchmarks/, page text)`` pairs."""
    lines = ["| page | produced by |", "| --- | --- |"]
    for rel, text in sorted(pages):
        title = _TITLE.search(text)
        name = title.group(1) if title else rel
        scripts = sorted(set(_SCRIPT.findall(text)))
        source = ", ".join(f"`{s}`" for s in scripts) or "(the page does not say)"
        lines.append(f"| [{name}]({rel}) | {source} |")
    if len(lines) == 2:
        return "No benchmark page has been written yet."
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: fill the marker of ``benchmarks/index.md``; other pages pass through."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its {MARKER} marker: the page list has nowhere to go")
    pages = [
        (str(PurePosixPath(f.src_uri).relative_to("benchmarks")), f.content_string)
        for f in files.documentation_pages()
        if f.src_uri.startswith("benchmarks/") and f.src_uri != PAGE
    ]
    return markdown.replace(MARKER, benchmark_rows(pages))
