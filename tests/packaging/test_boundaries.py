"""Distribution boundaries: a plugin (or contrib code) builds only on other distributions'
public API, never on a name or module that starts with an underscore."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _own_package(path: Path) -> str | None:
    """The top-level import package a file belongs to (``rlblocks_buffer_her``), if any."""
    parts = path.relative_to(ROOT).parts
    if "src" in parts:
        return parts[parts.index("src") + 1]
    return None


def _private_imports(path: Path) -> list[str]:
    own = _own_package(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules, names = [node.module], [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [a.name for a in node.names], []
        else:
            continue
        for module in modules:
            top = module.split(".")[0]
            if not top.startswith("rlblocks") or top == own:
                continue
            private = [p for p in module.split(".")[1:] if p.startswith("_")]
            private += [n for n in names if n.startswith("_") and n != "__version__"]
            if private:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {module} {private}")
    return found


def test_no_distribution_imports_another_ones_private_names() -> None:
    files = [p for base in ("plugins", "contrib") for p in (ROOT / base).rglob("*.py")
             if "build" not in p.parts and ".egg-info" not in str(p)]
    assert len(files) > 50
    offenders = [line for f in files for line in _private_imports(f)]
    assert not offenders, "\n".join(offenders)


def test_the_registry_knows_every_first_party_plugin_and_its_distribution() -> None:
    # an unknown name's error says which first-party distribution to install: the list must
    # hold every plugin this repository ships, under the distribution name it really has
    import tomllib

    from rlblocks.plugins import FIRST_PARTY, GROUPS, first_party_home, install_hint

    shipped: dict[str, set[str]] = {kind: set() for kind in GROUPS}
    for pyproject in sorted(ROOT.glob("plugins/*/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        for kind, group in GROUPS.items():
            for name in project.get("entry-points", {}).get(group, {}):
                shipped[kind].add(name)
                folder = pyproject.parent.relative_to(ROOT).as_posix()
                assert first_party_home(kind, name) == (project["name"], folder), pyproject
                assert install_hint(kind, name).endswith(f" ./{folder}"), pyproject
    listed = {kind: set(names) for kind, names in FIRST_PARTY.items() if names}
    assert listed == {kind: names for kind, names in shipped.items() if names}
