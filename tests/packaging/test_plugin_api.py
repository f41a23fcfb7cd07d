"""The declared plugin API: the faces' ``__all__`` lists are the names plugins may import.

Every first-party plugin, the plugin template and contrib import only names a face declares
(from the face itself, never from the private module behind it); each face's ``__all__`` agrees
with the names it resolves; and the faces stay light (no torch until a name needs it).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "src" / "rlblocks"


def faces() -> dict[str, list[str]]:
    """``{face module: its __all__}`` for every package of core (an ``__init__.py``)."""
    found = {}
    for init in sorted(CORE.rglob("__init__.py")):
        parts = init.parent.relative_to(CORE.parent).parts
        if any(p.startswith("_") for p in parts):
            continue
        name = ".".join(parts)
        found[name] = list(importlib.import_module(name).__all__)
    return found


FACES = faces()


def undeclared_imports(source: str, declared: dict[str, list[str]]) -> list[str]:
    """The imports of rlblocks in ``source`` that reach past the declared API: a module that is
    no face, or a name its face does not declare. One line per offence."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module != "rlblocks" and not module.startswith("rlblocks."):
                continue
            if module not in declared:
                problems.append(f"line {node.lineno}: {module} is not a face of rlblocks")
                continue
            for alias in node.names:
                child = f"{module}.{alias.name}"
                if alias.name not in declared[module] and child not in declared:
                    problems.append(
                        f"line {node.lineno}: {module} does not declare {alias.name!r}"
                    )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                if (name == "rlblocks" or name.startswith("rlblocks.")) and name not in declared:
                    problems.append(f"line {node.lineno}: {name} is not a face of rlblocks")
    return problems


def outside_sources() -> list[Path]:
    """Every Python file of the first-party plugins, the plugin template and contrib."""
    files = []
    for top in ("plugins", "contrib"):
        files += [p for p in (ROOT / top).rglob("*.py") if "build" not in p.parts]
    return sorted(files)


def test_the_checker_catches_a_private_module_and_an_undeclared_name():
    source = (
        "from rlblocks.contracts._batch import Batch\n"
        "from rlblocks.algo import BasePolicy, _not_declared\n"
        "import rlblocks.run._experiment\n"
        "from rlblocks import train\n"
        "from rlblocks.contracts import validators\n"
    )
    problems = undeclared_imports(source, FACES)
    assert problems == [
        "line 1: rlblocks.contracts._batch is not a face of rlblocks",
        "line 2: rlblocks.algo does not declare '_not_declared'",
        "line 3: rlblocks.run._experiment is not a face of rlblocks",
    ]


def test_plugins_the_template_and_contrib_import_only_declared_names():
    offences = {}
    for path in outside_sources():
        problems = undeclared_imports(path.read_text(encoding="utf-8"), FACES)
        if problems:
            offences[str(path.relative_to(ROOT))] = problems
    assert not offences, (
        "imports of undeclared rlblocks names (declare the name in a face's __all__, or use "
        f"one that is declared): {offences}"
    )


def test_there_are_plugins_to_check():
    # the check above must not pass by finding nothing
    sources = outside_sources()
    assert len(sources) > 100
    assert any("rlblocks_algo_dqn" in str(p) for p in sources)


@pytest.mark.parametrize("face", sorted(FACES))
def test_every_declared_name_resolves_and_none_is_private(face):
    module = importlib.import_module(face)
    declared = FACES[face]
    assert len(declared) == len(set(declared)), f"{face}.__all__ lists a name twice"
    for name in declared:
        assert name == "__version__" or not name.startswith("_"), (face, name)
        assert getattr(module, name) is not None, (face, name)
    assert sorted(dir(module)) == sorted(set(dir(module)))


@pytest.mark.parametrize("face", sorted(f for f in FACES if f != "rlblocks.testing"))
def test_a_face_declares_exactly_what_its_type_checking_block_imports(face):
    # the face's __getattr__ resolves the TYPE_CHECKING imports; __all__ is what readers and the
    # API reference see: the two lists must agree
    path = CORE.parent.joinpath(*face.split("."), "__init__.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                if isinstance(item, ast.ImportFrom):
                    imported |= {a.asname or a.name for a in item.names}
    declared = set(FACES[face]) - {"__version__"}
    assert imported == declared, (
        f"{face}: in __all__ only {sorted(declared - imported)}, "
        f"imported only {sorted(imported - declared)}"
    )


def test_importing_the_faces_and_a_plugin_config_does_not_import_torch():
    code = (
        "import sys\n"
        "import rlblocks, rlblocks.contracts, rlblocks.plugins, rlblocks.algo, rlblocks.run\n"
        "from rlblocks.contracts import validators\n"
        "from rlblocks.algo import OnPolicyConfig, ValueBasedConfig\n"
        "import rlblocks_algo_ppo.config, rlblocks_algo_dqn._spec\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_unknown_name_of_a_face_is_an_attribute_error_naming_the_face():
    import rlblocks.algo

    with pytest.raises(AttributeError, match=r"module 'rlblocks\.algo' has no attribute 'PPO'"):
        rlblocks.algo.PPO  # noqa: B018


def test_wrapper_paths_that_runs_wrote_before_the_1_0_layout_still_import():
    # config.json of an Atari run names its wrappers "rlblocks.atari:FireReset", ...
    from rlblocks.plugins import import_entry
    from rlblocks.run import EpisodicLife, FireReset

    assert import_entry("rlblocks.atari:FireReset", "env.wrappers") == (FireReset, {})
    table = {"path": "rlblocks.atari:EpisodicLife", "kwargs": {}}
    assert import_entry(table, "env.train_wrappers")[0] is EpisodicLife
