"""Every install hint in the code names a command that works from this repository today.

The plugin distributions are not on the package index, so a hint may not say
``pip install rlblocks-logger-tensorboard`` (a name anyone could claim there): it names the
folder (``pip install ./plugins/loggers/tensorboard``), a core extra (``'rlblocks[plot]'``,
which pip fills in for the installed core) or a third-party library this repository depends on.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from rlblocks.plugins import FIRST_PARTY, install_hint
from rlblocks.plugins._registry import FIRST_PARTY_NEEDS

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    *sorted((ROOT / "core" / "src").rglob("*.py")),
    *sorted(ROOT.glob("plugins/*/*/src/**/*.py")),
]
#: ``pip install`` and its first target (options skipped), quoted or not
_PIP = re.compile(r"pip install\s+(?:-\S+\s+)*('[^']+'|\"[^\"]+\"|[^\s;,)`]+)")
#: a distribution of this repository named without pip: it must say where it comes from
_DIST = re.compile(r"\binstall (rlblocks-[a-z0-9-]+)")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _strings(path: Path) -> list[str]:
    """The string literals of a module; an f-string's parts joined with ``{}`` for each value
    (adjacent literals are one constant after parsing, so a hint split over lines is whole)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            out.append("".join(
                v.value if isinstance(v, ast.Constant) else "{}" for v in node.values
            ))  # fmt: skip
    return out


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _third_party_names() -> set[str]:
    """The third-party distributions this repository's packages and requirements name."""
    names: set[str] = set()
    reqs = [*ROOT.glob("requirements*.txt")]
    lines = [ln.split("#")[0].strip() for f in reqs for ln in f.read_text().splitlines()]
    for folder in [ROOT / "core", *ROOT.glob("plugins/*/*")]:
        project = _project(folder)
        lines += project.get("dependencies", [])
        lines += [d for ds in project.get("optional-dependencies", {}).values() for d in ds]
    for line in lines:
        match = _NAME.match(line)
        if match and not line.startswith("-"):
            names.add(re.sub(r"[-_.]+", "-", match.group(0)).lower())
    return names


def _problem(target: str, third_party: set[str]) -> str | None:
    """Why ``pip install TARGET`` would not work from this repository today, or None."""
    target = target.strip("'\"")
    if "{}" in target:
        return None  # built at run time: install_hint, checked below for every name
    path, _, extras = target.partition("[")
    extras_wanted = {e.strip() for e in extras.rstrip("]").split(",") if e.strip()}
    if path.startswith("./"):
        folder = ROOT / path[2:]
        if not (folder / "pyproject.toml").is_file():
            return f"{path} is not a distribution's folder in the repository"
        declared = set(_project(folder).get("optional-dependencies", {}))
    elif path == "rlblocks":  # core, installed: pip adds the extra's libraries
        declared = set(_project(ROOT / "core").get("optional-dependencies", {}))
        if not extras_wanted:
            return "core itself is not on the package index: name an extra or ./core"
    else:
        name = re.sub(r"[-_.]+", "-", _NAME.match(path).group(0)).lower()
        if name.startswith("rlblocks"):
            return f"{name} is not on the package index; name its folder (./plugins/...)"
        if name not in third_party:
            return f"{name} is not a library this repository depends on"
        return None
    missing = extras_wanted - declared
    return f"{path} has no extra {sorted(missing)}" if missing else None


def test_the_scan_finds_the_hints() -> None:
    # the scan must see hints at all (a broken regex would pass every check below)
    targets = [m.group(1) for f in SOURCES for s in _strings(f) for m in _PIP.finditer(s)]
    assert "'rlblocks[plot]'" in targets
    assert any(t.startswith("'./plugins/families/pettingzoo") for t in targets)
    assert len(targets) >= 10


def test_every_pip_install_hint_names_something_installable_from_the_repository() -> None:
    third_party = _third_party_names()
    bad = []
    for path in SOURCES:
        for text in _strings(path):
            for match in _PIP.finditer(text):
                problem = _problem(match.group(1), third_party)
                if problem:
                    bad.append(f"{path.relative_to(ROOT)}: {match.group(0)!r}: {problem}")
    assert not bad, "\n".join(bad)


def test_a_distribution_named_without_pip_says_it_comes_from_the_repository() -> None:
    shipped = {_project(f)["name"] for f in ROOT.glob("plugins/*/*")}
    bad = []
    for path in SOURCES:
        for text in _strings(path):
            for match in _DIST.finditer(text):
                if match.group(1) not in shipped:
                    bad.append(f"{path.relative_to(ROOT)}: {match.group(1)} is not shipped here")
                elif "from the rlblocks repository" not in text:
                    bad.append(f"{path.relative_to(ROOT)}: {match.group(0)!r} says not from where")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("kind", sorted(FIRST_PARTY))
def test_install_hint_of_every_first_party_name_works_from_the_repository(kind: str) -> None:
    third_party = _third_party_names()
    for name in FIRST_PARTY[kind]:
        hint = install_hint(kind, name)
        assert hint is not None and hint.startswith("from the rlblocks repository: pip install ")
        targets = hint.removeprefix("from the rlblocks repository: pip install ").split(" ")
        assert all(_problem(t, third_party) is None for t in targets), hint


def test_the_first_party_needs_match_the_pyprojects() -> None:
    # a hint must name every first-party distribution a plugin depends on: pip would look for
    # them on the package index otherwise
    for folder in ROOT.glob("plugins/*/*"):
        project = _project(folder)
        needs = sorted(
            _NAME.match(d).group(0) + (d[d.index("[") : d.index("]") + 1] if "[" in d else "")
            for d in project.get("dependencies", [])
            if d.startswith("rlblocks-")
        )
        assert sorted(FIRST_PARTY_NEEDS.get(project["name"], ())) == needs, project["name"]


def test_install_hint_names_what_a_plugin_needs_before_it() -> None:
    hint = install_hint("algo", "rainbow")
    assert hint is not None
    order = hint.split("pip install ")[1].split()
    assert order.index("./plugins/buffers/vector") < order.index("./plugins/buffers/prioritized")
    assert order[-1] == "./plugins/algos/rainbow" and "./plugins/algos/c51" in order


def _doc_commands() -> list[tuple[str, str]]:
    """``(file, the words after pip install)`` of every pip command in the README and docs."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        for match in re.finditer(r"pip install ([^`\n#&]*)", text):
            found.append((path.relative_to(ROOT).as_posix(), match.group(1)))
    return found


def test_the_docs_install_rlblocks_from_the_repository_or_a_wheel_folder() -> None:
    commands = _doc_commands()
    assert any("./plugins/loggers/tensorboard" in c for _, c in commands), "the scan found none"
    bad = []
    for where, command in commands:
        for word in command.split():
            word = word.strip("'\"")
            if word.startswith("./"):
                folder = ROOT / word[2:].partition("[")[0]
                if not (folder / "pyproject.toml").is_file():
                    bad.append(f"{where}: {word} is not a distribution's folder")
            elif word.startswith("rlblocks-") and "--find-links" not in command:
                bad.append(f"{where}: {word} is not on the package index (name its folder)")
    assert not bad, "\n".join(bad)
