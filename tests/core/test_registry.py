"""Entry-point registries: tiers, error messages, duplicates, broken plugins, in-process specs."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.algo import BasePolicy
from rlblocks.cli import main
from rlblocks.contracts import (
    Batch,
    ConfigError,
    DuplicateComponentError,
    PluginLoadError,
    UnknownComponentError,
)
from rlblocks.plugins import AlgoSpec, BufferSpec, Registry, get_registry, reset_caches
from rlblocks.plugins import _registry as registry_module
from rlblocks.replay._specs import REPLAY


@pytest.fixture
def make_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rlblocks_registries):
    """Install a fake distribution: a dist-info with METADATA and entry_points.txt, plus modules,
    in a fresh directory prepended to sys.path (importlib.metadata finds it there)."""

    def make(
        name: str, version: str, entry_points: dict[str, dict[str, str]], files: dict[str, str]
    ) -> Path:
        site = tmp_path / f"site-{name}"
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        sections = [
            f"[{group}]\n" + "".join(f"{ep} = {value}\n" for ep, value in eps.items())
            for group, eps in entry_points.items()
        ]
        (info / "entry_points.txt").write_text("\n".join(sections))
        for rel, source in files.items():
            path = site / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(site))
        reset_caches()
        return site

    return make


@pytest.fixture
def uid() -> str:
    """A prefix that keeps this test's fake modules apart from every other test's."""
    return f"fake_{uuid.uuid4().hex[:10]}"


def algo_spec_module(name: str, summary: str, impl: str) -> str:
    return f"""
        from rlblocks.plugins import AlgoSpec
        SPEC = AlgoSpec(name={name!r}, summary={summary!r}, impl={impl!r})
    """


# -- tier 0 -------------------------------------------------------------------------------------


def test_entries_read_metadata_without_importing_plugin_code(make_dist, uid):
    make_dist(
        "fake-lazy", "0.3.0",
        {"rlblocks.algos": {"lazy": f"{uid}._spec:SPEC"}},
        {f"{uid}/__init__.py": "", f"{uid}/_spec.py": "raise RuntimeError('imported!')"},
    )
    registry = get_registry("algo")
    (entry,) = [e for e in registry.entries() if e.name == "lazy"]
    assert (entry.distribution, entry.version) == ("fake-lazy", "0.3.0")
    assert entry.origin == "entry-point"
    assert entry.value == f"{uid}._spec:SPEC"
    assert entry.qualified_name == "lazy@fake-lazy"
    assert "lazy" in registry.names()
    assert uid not in sys.modules


def test_core_replay_buffer_is_registered_through_core_entry_point(rlblocks_registries):
    registry = get_registry("buffer")
    (entry,) = [e for e in registry.entries() if e.name == "replay"]
    assert entry.distribution == "rlblocks"
    assert registry.spec("replay") is REPLAY


def test_get_registry_rejects_unknown_kind():
    with pytest.raises(UnknownComponentError, match="algo, buffer, env, logger"):
        get_registry("algorithm")


# -- unknown names ------------------------------------------------------------------------------


def test_unknown_name_lists_installed_names_and_close_matches(rlblocks_registries):
    with pytest.raises(UnknownComponentError) as info:
        get_registry("buffer").spec("replya")
    message = str(info.value)
    assert "no buffer named 'replya'" in message
    assert "Installed buffers:" in message and "replay" in message
    assert "Did you mean: replay?" in message


def test_unknown_first_party_name_says_which_distribution_to_install(
    rlblocks_registries, monkeypatch
):
    # A made-up first-party name, so the test holds whichever plugins are installed here.
    monkeypatch.setitem(registry_module.FIRST_PARTY, "algo", frozenset({"zz_fake_algo"}))
    registry = get_registry("algo")
    with pytest.raises(UnknownComponentError, match=r"pip install \./plugins/algos/zz-fake-algo"):
        registry.load("zz_fake_algo")
    with pytest.raises(UnknownComponentError) as info:
        registry.resolve("zz_fake_alg")
    assert (
        "zz_fake_algo (not installed; from the rlblocks repository: "
        "pip install ./plugins/algos/zz-fake-algo)"
    ) in str(info.value)


# -- duplicates ---------------------------------------------------------------------------------


@pytest.fixture
def twin_dists(make_dist, uid):
    for dist in ("fake-a", "fake-b"):
        module = f"{uid}_{dist[-1]}"
        make_dist(
            dist, "1.0",
            {"rlblocks.algos": {"twin": f"{module}:SPEC"}},
            {f"{module}.py": algo_spec_module("twin", f"from {dist}", f"{module}:Impl")},
        )


def test_two_distributions_claiming_one_name_is_an_error_naming_both(twin_dists):
    with pytest.raises(DuplicateComponentError) as info:
        get_registry("algo").spec("twin")
    message = str(info.value)
    assert "fake-a 1.0" in message and "fake-b 1.0" in message
    assert "'twin@fake-a'" in message and "'twin@fake-b'" in message
    assert [e.distribution for e in get_registry("algo").entries() if e.name == "twin"] == [
        "fake-a", "fake-b",
    ]


def test_qualified_name_picks_one_of_two_distributions(twin_dists):
    registry = get_registry("algo")
    assert registry.spec("twin@fake-a").summary == "from fake-a"
    # Distribution names compare as pip does: case, '_' and '-' do not matter.
    assert registry.spec("twin@Fake_B").summary == "from fake-b"
    with pytest.raises(UnknownComponentError, match="provided by: fake-a, fake-b"):
        registry.spec("twin@fake-c")


# -- broken plugins -----------------------------------------------------------------------------


@pytest.fixture
def broken_dist(make_dist, uid):
    make_dist(
        "fake-broken", "1.2.3",
        {"rlblocks.algos": {"broken": f"{uid}._spec:SPEC"}},
        {
            f"{uid}/__init__.py": "",
            f"{uid}/_spec.py": "raise RuntimeError('boom: the spec module is broken')",
        },
    )
    return uid


def test_spec_that_fails_to_import_names_distribution_version_and_entry_point(broken_dist):
    with pytest.raises(PluginLoadError) as info:
        get_registry("algo").spec("broken")
    message = str(info.value)
    assert "fake-broken 1.2.3" in message
    assert f"broken = {broken_dist}._spec:SPEC" in message
    assert "rlblocks.algos" in message
    assert "RuntimeError: boom: the spec module is broken" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_plugin_built_for_plugin_api_1_is_refused_by_name_with_what_to_do(make_dist, uid):
    # plugin API 1 specs imported their classes from rlblocks' modules of before the 1.0 layout
    make_dist(
        "fake-old-algo", "0.3.0",
        {"rlblocks.algos": {"oldalgo": f"{uid}._spec:SPEC"}},
        {
            f"{uid}/__init__.py": "",
            f"{uid}/_spec.py": """
                from rlblocks.plugins.spec import AlgoSpec
                SPEC = AlgoSpec(name="oldalgo", summary="s", impl="x.y:Z")
            """,
        },
    )
    with pytest.raises(PluginLoadError) as info:
        get_registry("algo").spec("oldalgo")
    message = str(info.value)
    assert "fake-old-algo 0.3.0" in message
    assert "built for plugin API 1" in message and "rlblocks.plugins.spec" in message
    assert "Upgrade fake-old-algo to a release for plugin API 2" in message


def test_a_spec_declaring_another_plugin_api_is_refused_naming_both(make_dist, uid):
    make_dist(
        "fake-api-one", "0.1.0",
        {"rlblocks.algos": {"apione": f"{uid}._spec:SPEC"}},
        {
            f"{uid}/__init__.py": "",
            f"{uid}/_spec.py": """
                from rlblocks.plugins import AlgoSpec
                SPEC = AlgoSpec(name="apione", summary="s", impl="x.y:Z", api_version=1)
            """,
        },
    )
    with pytest.raises(PluginLoadError, match=r"built for plugin API 1, this rlblocks speaks 2; "
                       r"upgrade fake-api-one"):
        get_registry("algo").spec("apione")


def test_list_marks_a_broken_plugin_and_still_lists_the_rest(broken_dist, capsys):
    assert main(["list"]) == 0
    out, err = capsys.readouterr()
    (broken_row,) = [line for line in out.splitlines() if line.startswith("broken ")]
    assert "fake-broken" in broken_row and "1.2.3" in broken_row
    assert "BROKEN: the algo plugin 'broken'" in broken_row
    assert any(line.startswith("replay ") for line in out.splitlines())
    assert "1 plugin(s) failed to load" in err


def test_loadable_specs_leave_out_a_broken_plugin_and_keep_the_rest(broken_dist):
    reg = get_registry("algo")
    specs = reg.loadable_specs()
    assert "broken" in reg.names() and "broken" not in specs
    assert specs["dqn"] is reg.spec("dqn") and set(specs) == set(reg.names()) - {"broken"}


def test_the_algorithms_offered_for_some_spaces_leave_out_a_broken_plugin(broken_dist):
    import gymnasium as gym

    from rlblocks.run._compose import _algos_for

    offered = _algos_for(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    names = offered.split(": ", 1)[1].split(", ")
    assert "dqn" in names and "broken" not in names


def test_implementation_that_fails_to_import_raises_plugin_load_error(make_dist, uid):
    make_dist(
        "fake-noimpl", "0.1.0",
        {"rlblocks.algos": {"noimpl": f"{uid}:SPEC"}},
        {f"{uid}.py": algo_spec_module("noimpl", "impl is missing", f"{uid}_missing.algo:Algo")},
    )
    registry = get_registry("algo")
    assert registry.spec("noimpl").summary == "impl is missing"  # tier 1 works
    with pytest.raises(PluginLoadError) as info:
        registry.load("noimpl")
    message = str(info.value)
    assert "fake-noimpl 0.1.0" in message and f"{uid}_missing.algo:Algo" in message
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_spec_of_the_wrong_kind_is_rejected(make_dist, uid):
    make_dist(
        "fake-mixup", "2.0",
        {"rlblocks.algos": {"mixup": f"{uid}:SPEC"}},
        {f"{uid}.py": """
            from rlblocks.plugins import BufferSpec
            SPEC = BufferSpec(name="mixup", summary="a buffer", impl="x:Y")
        """},
    )
    with pytest.raises(PluginLoadError, match=r"BufferSpec \(kind 'buffer'\).*rlblocks\.buffers"):
        get_registry("algo").spec("mixup")


def test_spec_whose_name_differs_from_its_entry_point_is_rejected(make_dist, uid):
    make_dist(
        "fake-renamed", "1.0",
        {"rlblocks.algos": {"newname": f"{uid}:SPEC"}},
        {f"{uid}.py": algo_spec_module("oldname", "renamed", "x:Y")},
    )
    with pytest.raises(PluginLoadError, match="named 'oldname' but its entry point is named"):
        get_registry("algo").spec("newname")


def test_entry_point_at_something_that_is_not_a_spec_is_rejected(make_dist, uid):
    make_dist(
        "fake-notspec", "1.0",
        {"rlblocks.algos": {"notspec": f"{uid}:SPEC"}},
        {f"{uid}.py": "SPEC = {'name': 'notspec'}"},
    )
    with pytest.raises(PluginLoadError, match="is a dict, not a PluginSpec"):
        get_registry("algo").spec("notspec")


# -- in-process registration --------------------------------------------------------------------


def test_in_process_add_is_undone_when_the_scope_ends():
    registry = get_registry("algo")
    spec = AlgoSpec(name="notebook_algo", summary="defined in a cell", impl="x:Y")
    with registry.scoped():
        assert registry.add(spec) is spec
        assert "notebook_algo" in registry.names()
        assert registry.spec("notebook_algo") is spec
        (entry,) = [e for e in registry.entries() if e.name == "notebook_algo"]
        assert entry.origin == "in-process"
        registry.remove("notebook_algo")
        assert "notebook_algo" not in registry
        registry.add(spec)
    assert "notebook_algo" not in registry.names()
    with pytest.raises(UnknownComponentError):
        registry.spec("notebook_algo")


def test_in_process_add_shadows_an_entry_point_which_stays_reachable_qualified(
    rlblocks_add_plugin,
):
    mine = BufferSpec(name="replay", summary="my replay", impl="x:Y")
    rlblocks_add_plugin(mine, distribution="my-notebook")
    registry = get_registry("buffer")
    assert registry.spec("replay") is mine
    assert registry.spec("replay@my-notebook") is mine
    assert registry.spec("replay@rlblocks") is REPLAY
    assert [e.distribution for e in registry.entries() if e.name == "replay"] == ["my-notebook"]


def test_fixture_registration_does_not_outlive_its_test():
    # Runs after the test above in file order; the fixture's scope restored the entry point.
    assert get_registry("buffer").spec("replay") is REPLAY


def test_add_rejects_a_spec_of_another_kind():
    with pytest.raises(TypeError, match="get_registry\\('buffer'\\)"):
        get_registry("algo").add(BufferSpec(name="b", summary="s", impl="x:Y"))


def test_remove_only_removes_in_process_registrations():
    with pytest.raises(UnknownComponentError, match="no in-process buffer named 'replay'"):
        get_registry("buffer").remove("replay")


def test_registry_is_one_per_kind():
    assert get_registry("env") is get_registry("env")
    assert isinstance(get_registry("logger"), Registry)


# -- what a spec and its policy hold ------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("config=Cfg()", r"config is Cfg\(lr=0\.1\), an instance; give the config class itself"),
        ("config=Plain", r"config Plain is not an attrs class; decorate it with @attrs.define"),
        ("config=NoDefault", r"NoDefault has fields without a default \(lr\)"),
        ("action_spaces='Discrete'", r"action_spaces is 'Discrete'; give a tuple"),
    ],
)
def test_a_spec_s_own_mistakes_are_named_when_it_loads(make_dist, uid, body, message):
    make_dist(
        "fake-sloppy", "0.1",
        {"rlblocks.algos": {"sloppy": f"{uid}:SPEC"}},
        {f"{uid}.py": f"""
            import attrs
            from rlblocks.plugins import AlgoSpec

            @attrs.define
            class Cfg:
                lr: float = 0.1

            class Plain:
                lr = 0.1

            @attrs.define
            class NoDefault:
                lr: float

            SPEC = AlgoSpec(name="sloppy", summary="s", impl="x:Y", {body})
        """},
    )  # fmt: skip
    with pytest.raises(PluginLoadError, match=r"plugin 'sloppy' from distribution fake-sloppy.*"
                                              + message):
        get_registry("algo").spec("sloppy")


def test_an_in_process_spec_s_mistakes_are_named_when_it_is_added(rlblocks_add_plugin):
    with pytest.raises(PluginLoadError, match="is not an attrs class"):
        rlblocks_add_plugin(AlgoSpec(name="nb", summary="s", impl="x:Y", config=dict))


class _NotAPolicy:
    def __init__(self, *args, **kwargs) -> None:
        pass


class _NoLearn(BasePolicy):
    def __init__(self, observation_space, action_space, config=None, device="cpu") -> None:
        super().__init__(observation_space, action_space, device)

    def forward(self, batch, state=None, **kwargs):
        return Batch(act=np.zeros(len(batch.obs), dtype=np.int64))


@pytest.mark.parametrize(
    ("impl", "message"),
    [
        ("_NotAPolicy", r"built a _NotAPolicy, which is not an rlblocks\.algo\.BasePolicy"),
        ("_NoLearn", r"policy _NoLearn does not implement learn"),
    ],
)
def test_a_policy_that_is_not_one_is_named_when_it_is_built(rlblocks_add_plugin, impl, message):
    rlblocks_add_plugin(AlgoSpec(name="half", summary="s", impl=f"{__name__}:{impl}"),
                        distribution="my-half")  # fmt: skip
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    with pytest.raises(PluginLoadError, match=r"algo plugin 'half' from in-process .*" + message):
        rlblocks.make_policy("half", space, gym.spaces.Discrete(2))


def test_make_policy_takes_a_dict_config_checked_by_field() -> None:
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    policy = rlblocks.make_policy("dqn", space, gym.spaces.Discrete(2), config={"lr": 0.01})
    assert policy.config.lr == 0.01
    with pytest.raises(ConfigError, match=r"lrr: unknown field; did you mean 'lr'"):
        rlblocks.make_policy("dqn", space, gym.spaces.Discrete(2), config={"lrr": 0.01})


def test_a_spec_s_invalid_defaults_are_blamed_on_the_plugin(rlblocks_add_plugin) -> None:
    from rlblocks.run import _config as cfg
    from rlblocks.run import spec_lookup

    dqn = get_registry("algo").spec("dqn")
    spec = AlgoSpec(name="typo-defaults", summary="s", impl=dqn.impl, config=dqn.config,
                    defaults={"trainr": {"batch_size": 32}})
    rlblocks_add_plugin(spec)
    for overrides in ([], ["trainer.max_env_steps=100"]):
        with pytest.raises(ConfigError, match=r"(?s)plugin 'typo-defaults' brings invalid "
                                              r"defaults.*not your config.*\$\.trainr"):
            cfg.build_config("typo-defaults", overrides=overrides, spec_lookup=spec_lookup)
    # the user's own typo is still the user's
    with pytest.raises(ConfigError, match=r"^\$\.algo\.lrr: unknown field"):
        cfg.build_config("dqn", overrides=["algo.lrr=1"], spec_lookup=spec_lookup)


def test_an_online_algorithm_that_uses_a_dataset_says_so_and_an_offline_one_cannot() -> None:
    online = AlgoSpec(name="x", summary="x", impl="m:C", training="on-policy", uses_dataset=True)
    assert online.describe()["training"] == "on-policy with a dataset"
    assert "uses_dataset" not in online.describe()
    plain = AlgoSpec(name="x", summary="x", impl="m:C", training="on-policy")
    assert plain.describe()["training"] == "on-policy"
    with pytest.raises(ValueError, match="offline one learns from it by definition"):
        AlgoSpec(name="x", summary="x", impl="m:C", training="offline", uses_dataset=True)


def test_a_policy_takes_a_dataset_only_when_its_algorithm_uses_one() -> None:
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    with pytest.raises(ConfigError, match="learns from no dataset"):
        BasePolicy(space, space).set_dataset(rlblocks.ReplayBuffer(4))
