"""The run config: merge order, field paths in errors, plugin options, files, round trips."""

import json
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from attrs import define, field, validators
from hypothesis import given, settings
from hypothesis import strategies as st

from rlblocks.contracts import ConfigError, UnknownComponentError
from rlblocks.plugins import AlgoSpec, BufferSpec, EnvBackendSpec, PluginSpec
from rlblocks.replay._specs import REPLAY, UNIFORM
from rlblocks.run import (
    BufferConfig,
    EnvConfig,
    ExperimentConfig,
    RunConfig,
    TrainerConfig,
    build_config,
    load_config_file,
    parse_override,
    read_config,
    structure_options,
    to_dict,
    write_config,
)


@define(kw_only=True)
class FakeDQNConfig:
    lr: float = field(default=1e-3, validator=validators.gt(0))
    gamma: float = field(default=0.99, validator=[validators.ge(0), validators.le(1)])
    hidden: tuple[int, ...] = (64, 64)


@define(kw_only=True)
class FakePrioritizedConfig:
    alpha: float = 0.6
    beta: float = 0.4


@define(kw_only=True)
class FakeShmemConfig:
    context: str = "fork"


@define(kw_only=True)
class ClashingConfig:
    size: int = 3


SPECS: dict[tuple[str, str], PluginSpec] = {
    ("algo", "dqn"): AlgoSpec(
        name="dqn",
        summary="fake dqn",
        impl="fake:DQN",
        config=FakeDQNConfig,
        defaults={"trainer": {"batch_size": 32}, "buffer": {"size": 5000}},
    ),
    ("algo", "noconf"): AlgoSpec(name="noconf", summary="no options", impl="fake:NoConf"),
    ("algo", "envwise"): AlgoSpec(
        name="envwise",
        summary="brings per-env defaults",
        impl="fake:DQN",
        config=FakeDQNConfig,
        defaults={"trainer": {"batch_size": 32, "max_env_steps": 1000}},
        env_defaults={
            "*Cheetah*": {"trainer": {"batch_size": 64}, "env": {"num_envs": 4}},
            "HalfCheetah-v5": {"trainer": {"max_env_steps": 3000}},
        },
    ),
    ("algo", "prio-dqn"): AlgoSpec(
        name="prio-dqn",
        summary="brings a prioritized buffer",
        impl="fake:DQN",
        config=FakeDQNConfig,
        defaults={"buffer": {"name": "prioritized", "alpha": 0.7}},
    ),
    ("buffer", "replay"): REPLAY,
    ("buffer", "uniform"): UNIFORM,
    ("buffer", "prioritized"): BufferSpec(
        name="prioritized", summary="", impl="fake:Prio", config=FakePrioritizedConfig,
        part="sampler",
    ),
    ("buffer", "clashing"): BufferSpec(
        name="clashing", summary="", impl="fake:Clash", config=ClashingConfig, part="sampler"
    ),
    ("env", "dummy"): EnvBackendSpec(name="dummy", summary="", impl="fake:Dummy"),
    ("env", "shmem"): EnvBackendSpec(
        name="shmem", summary="", impl="fake:Shmem", config=FakeShmemConfig
    ),
}


def lookup(kind: str, name: str) -> PluginSpec:
    try:
        return SPECS[kind, name]
    except KeyError:
        raise UnknownComponentError(f"no {kind} named {name!r}") from None


def build(algo: str = "dqn", **kwargs: Any) -> ExperimentConfig:
    return build_config(algo, spec_lookup=lookup, **kwargs)


def config_error(*overrides: str, algo: str = "dqn", **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        build(algo, overrides=overrides, **kwargs)
    return str(info.value)


# --- parse_override ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("algo.lr=3e-4", ("algo", "lr"), 3e-4),
        ("trainer.batch_size=64", ("trainer", "batch_size"), 64),
        ("trainer.max_env_steps=1e5", ("trainer", "max_env_steps"), 100000.0),
        ("run.progress=false", ("run", "progress"), False),
        ("buffer.name=prioritized", ("buffer", "name"), "prioritized"),
        ('env.id="CartPole-v1"', ("env", "id"), "CartPole-v1"),
        ("env.id=CartPole-v1", ("env", "id"), "CartPole-v1"),
        ("run.device=cuda:0", ("run", "device"), "cuda:0"),
        ('run.loggers=["csv"]', ("run", "loggers"), ["csv"]),
        (
            'env.make_kwargs={render_mode="rgb_array"}',
            ("env", "make_kwargs"),
            {"render_mode": "rgb_array"},
        ),
        ("trainer.stop_reward=null", ("trainer", "stop_reward"), None),
        ("run.run_dir=2024-01-01", ("run", "run_dir"), "2024-01-01"),
        ("run.run_dir=runs/a=b", ("run", "run_dir"), "runs/a=b"),
        (" algo.lr = 0.5 ", ("algo", "lr"), 0.5),
        ("env.id=", ("env", "id"), ""),
    ],
)
def test_parse_override_reads_toml_values_and_falls_back_to_bare_strings(
    text: str, path: tuple[str, ...], value: Any
) -> None:
    parsed_path, parsed_value = parse_override(text)
    assert parsed_path == path
    assert parsed_value == value
    assert type(parsed_value) is type(value)


@pytest.mark.parametrize("text", ["algo.lr", "=3", ".lr=3", "algo..lr=3", "algo.=3", ""])
def test_parse_override_rejects_a_missing_equals_or_empty_path_with_the_right_form(
    text: str,
) -> None:
    with pytest.raises(ConfigError, match=r"section\.field=value, e\.g\. algo\.lr=3e-4"):
        parse_override(text)


# --- merge order -------------------------------------------------------------------------------


def test_section_defaults_apply_when_nothing_is_given() -> None:
    config = build("noconf")
    assert config.trainer == TrainerConfig()
    assert config.run == RunConfig()
    assert config.env == EnvConfig()
    assert config.buffer == BufferConfig(options=None)
    assert config.algo is None


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        ({}, 32),  # the algo spec's default beats the class default (64)
        ({"file_data": {"trainer": {"batch_size": 16}}}, 16),
        (
            {"file_data": {"trainer": {"batch_size": 16}}, "flags": {"trainer": {"batch_size": 8}}},
            8,
        ),
        (
            {
                "file_data": {"trainer": {"batch_size": 16}},
                "flags": {"trainer": {"batch_size": 8}},
                "overrides": ["trainer.batch_size=4"],
            },
            4,
        ),
        ({"overrides": ["trainer.batch_size=4", "trainer.batch_size=2"]}, 2),
    ],
)
def test_later_layers_win(layers: dict[str, Any], expected: int) -> None:
    assert build(**layers).trainer.batch_size == expected


def test_layers_deep_merge_key_by_key() -> None:
    config = build(
        file_data={"trainer": {"test_episodes": 7}, "env": {"make_kwargs": {"a": 1}}},
        flags={"trainer": {"warmup_steps": 100}, "env": {"make_kwargs": {"b": 2}}},
        overrides=["env.make_kwargs={c=3}", "run.seed=5"],
    )
    assert config.trainer.test_episodes == 7
    assert config.trainer.warmup_steps == 100
    assert config.trainer.batch_size == 32  # the algo default survives the file's trainer table
    assert config.buffer.size == 5000
    assert config.env.make_kwargs == {"a": 1, "b": 2, "c": 3}
    assert config.run.seed == 5


def test_build_config_does_not_mutate_its_inputs() -> None:
    file_data = {"env": {"make_kwargs": {"a": [1]}}}
    flags = {"env": {"make_kwargs": {"b": 2}}}
    config = build(file_data=file_data, flags=flags)
    config.env.make_kwargs["a"].append(2)
    assert file_data == {"env": {"make_kwargs": {"a": [1]}}}
    assert flags == {"env": {"make_kwargs": {"b": 2}}}
    assert SPECS["algo", "dqn"].defaults == {  # type: ignore[attr-defined]
        "trainer": {"batch_size": 32},
        "buffer": {"size": 5000},
    }


def test_parsed_override_pairs_are_accepted_too() -> None:
    config = build(overrides=[(("algo", "lr"), 0.25)])
    assert config.algo.lr == 0.25


# --- numbers -----------------------------------------------------------------------------------


def test_an_integral_float_is_accepted_for_an_int() -> None:
    config = build(overrides=["trainer.max_env_steps=1e5"])
    assert config.trainer.max_env_steps == 100_000
    assert type(config.trainer.max_env_steps) is int


def test_an_int_is_accepted_for_a_float() -> None:
    config = build(overrides=["algo.lr=1", "trainer.stop_reward=195"])
    assert config.algo.lr == 1.0
    assert type(config.algo.lr) is float
    assert type(config.trainer.stop_reward) is float


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("trainer.batch_size=abc", "$.trainer.batch_size: expected int, got 'abc'"),
        ("trainer.max_env_steps=1.5", "$.trainer.max_env_steps: expected int, got 1.5"),
        ("trainer.batch_size=true", "$.trainer.batch_size: expected int, got True"),
        ("algo.lr=fast", "$.algo.lr: expected float, got 'fast'"),
        ("run.progress=yes", "$.run.progress: expected bool (true or false), got 'yes'"),
        ("env.id=3", "$.env.id: expected str, got 3 (put it in quotes)"),
        ("run.loggers=csv", "$.run.loggers: expected an array, got 'csv'"),
        ('run.loggers=["csv", 3]', "$.run.loggers[1]: expected str, got 3 (put it in quotes)"),
        ('algo.hidden=[64, "x"]', "$.algo.hidden[1]: expected int, got 'x'"),
        ("env.make_kwargs=3", "$.env.make_kwargs: expected a table, got 3"),
        ("trainer=5", "$.trainer: expected a table, got 5"),
        ("trainer.stop_reward=high", "$.trainer.stop_reward: expected float, got 'high'"),
    ],
)
def test_a_wrong_type_names_the_field_path(override: str, line: str) -> None:
    assert config_error(override) == line


# --- validators --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("env.num_envs=0", "$.env.num_envs: must be an int >= 1, got 0"),
        ("trainer.warmup_steps=-1", "$.trainer.warmup_steps: must be an int >= 0, got -1"),
        (
            "trainer.update_per_step=-0.5",
            "$.trainer.update_per_step: must be a number from 0 to 1000 "
            "(gradient steps per env step), got -0.5",
        ),
        (
            "trainer.episode_per_collect=0",
            "$.trainer.episode_per_collect: must be an int >= 1, got 0",
        ),
        ('run.device=""', "$.run.device: must be a non-empty string, got ''"),
        ("algo.lr=-1", "$.algo.lr: 'lr' must be > 0: -1.0"),
        ("algo.gamma=2", "$.algo.gamma: 'gamma' must be <= 1: 2.0"),
        ("buffer.stack_num=0", "$.buffer.stack_num: must be an int >= 1, got 0"),
    ],
)
def test_a_validator_failure_names_the_field_path(override: str, line: str) -> None:
    assert config_error(override) == line


def test_sections_validate_when_built_directly() -> None:
    with pytest.raises(ValueError, match="must be an int >= 1, got 0"):
        TrainerConfig(batch_size=0)
    with pytest.raises(ValueError, match="must be an int >= 0"):
        RunConfig(seed=-1)


def test_every_error_is_reported_at_once_one_per_line() -> None:
    message = config_error(
        "algo.lrr=1", "env.num_envs=0", "trainer.batch_size=abc", "buffer.stack_num=0", "trainr.x=1"
    )
    assert message.splitlines() == [
        "$.trainr: unknown section; did you mean 'trainer'? "
        "sections: algo, env, buffer, trainer, run",
        "$.algo.lrr: unknown field; did you mean 'lr'? fields of algo (dqn): lr, gamma, hidden",
        "$.env.num_envs: must be an int >= 1, got 0",
        "$.buffer.stack_num: must be an int >= 1, got 0",
        "$.trainer.batch_size: expected int, got 'abc'",
    ]


def test_a_failed_build_leaves_attrs_validators_enabled() -> None:
    config_error("env.num_envs=0")
    assert not attrs.validators.get_disabled()
    with pytest.raises(ValueError):
        EnvConfig(num_envs=0)


# --- values out of range ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "line"),
    [
        (
            "trainer.stop_reward=nan",
            "$.trainer.stop_reward: must be a finite number or None (the env's registered "
            "threshold), got nan",
        ),
        (
            "trainer.stop_reward=-inf",
            "$.trainer.stop_reward: must be a finite number or None (the env's registered "
            "threshold), got -inf",
        ),
        (
            "trainer.on_nonfinite=skip",
            "$.trainer.on_nonfinite: unknown value 'skip'; did you mean 'skip_update'? choose "
            "one of: raise, skip_update",
        ),
        (
            "trainer.update_per_step=inf",
            "$.trainer.update_per_step: must be a number from 0 to 1000 "
            "(gradient steps per env step), got inf",
        ),
        ("buffer.size=2.7", "$.buffer.size: expected int, got 2.7"),
    ],
)
def test_trainer_and_buffer_values_out_of_range_are_one_line_each(override, line) -> None:
    assert config_error(override) == line


def test_a_collect_larger_than_the_budget_is_refused_unless_whole_episodes_are_collected() -> None:
    assert config_error("trainer.max_env_steps=100", "trainer.step_per_collect=256") == (
        "$.trainer.step_per_collect: 256 exceeds trainer.max_env_steps=100, so the run would "
        "overshoot its budget; lower it or raise max_env_steps"
    )
    config = build(
        overrides=[
            "trainer.max_env_steps=100",
            "trainer.step_per_collect=256",
            "trainer.episode_per_collect=2",
        ]
    )
    assert config.trainer.episode_per_collect == 2
    assert build(overrides=["trainer.on_nonfinite=skip_update"]).trainer.on_nonfinite == (
        "skip_update"
    )


def test_a_check_in_a_plugin_configs_post_init_is_a_config_line() -> None:
    @define(kw_only=True)
    class Checked:
        low: int = 0
        high: int = 1

        def __attrs_post_init__(self) -> None:
            if self.low > self.high:
                raise ValueError(f"low={self.low} exceeds high={self.high}")

    with pytest.raises(ConfigError, match=r"^\$: low=3 exceeds high=1$"):
        structure_options(Checked, {"low": 3}, label="algo (checked)")


# --- unknown keys ------------------------------------------------------------------------------


def test_an_unknown_field_gets_a_did_you_mean_hint_and_the_fields() -> None:
    assert config_error("algo.lrr=1e-3") == (
        "$.algo.lrr: unknown field; did you mean 'lr'? fields of algo (dqn): lr, gamma, hidden"
    )


def test_an_unknown_field_without_a_close_match_lists_the_fields_only() -> None:
    assert config_error("trainer.zzz=1") == (
        "$.trainer.zzz: unknown field; fields of trainer: max_env_steps, max_gradient_steps, "
        "step_per_round, step_per_collect, "
        "batch_mode, rollout_fragment_length, count_steps_by, "
        "async_collect, update_per_step, batch_size, warmup_steps, test_interval, test_episodes, "
        "log_interval, "
        "test_at_start, test_in_training, test_screen_episodes, stop_reward, checkpoint_interval, "
        "repeat_per_collect, episode_per_collect, on_nonfinite"
    )


def test_an_unknown_key_that_is_no_identifier_still_names_its_section() -> None:
    assert config_error(file_data={"buffer": {"stack-num": 2}}) == (
        "$.buffer['stack-num']: unknown field; did you mean 'stack_num'? "
        "fields of buffer (replay): name, size, sampler, relabel, writer, stack_num, "
        "ignore_obs_next, storage, path, dataset"
    )


def test_an_unknown_section_names_the_valid_sections() -> None:
    assert config_error(file_data={"bufer": {"size": 3}}) == (
        "$.bufer: unknown section; did you mean 'buffer'? sections: algo, env, buffer, trainer, run"
    )


def test_a_field_written_at_the_top_level_points_at_its_section() -> None:
    assert config_error("seed=3").startswith("$.seed: unknown section; did you mean 'run.seed'?")


def test_options_of_an_algorithm_without_a_config_class_are_rejected() -> None:
    assert config_error("algo.lr=1", algo="noconf") == (
        "$.algo.lr: unknown field; fields of algo (noconf): (none)"
    )


def test_the_internal_options_key_is_not_a_user_field() -> None:
    message = config_error(file_data={"buffer": {"options": {"stack_num": 2}}})
    assert message.startswith("$.buffer.options: unknown field;")


def test_algo_name_in_the_file_must_match_the_run() -> None:
    with pytest.raises(ConfigError, match=r"\$\.algo_name: the config says 'ppo'"):
        build(file_data={"algo_name": "ppo"})
    assert build(file_data={"algo_name": "dqn"}).algo_name == "dqn"


# --- plugin options ----------------------------------------------------------------------------


def test_buffer_parts_without_options_leave_none() -> None:
    assert build().buffer.options is None  # the shared ring and the uniform sampler


def test_switching_the_buffer_structures_its_options_into_the_plugins_class() -> None:
    config = build(
        file_data={"buffer": {"size": 1000}},
        overrides=["buffer.name=prioritized", "buffer.alpha=0.5"],
    )
    assert config.buffer == BufferConfig(
        name="prioritized", size=1000, options={"sampler": FakePrioritizedConfig(alpha=0.5)}
    )
    # the same sampler chosen by its own field, on the default layout
    by_field = build(overrides=["buffer.sampler=prioritized", "buffer.alpha=0.5"])
    assert by_field.buffer.options == {"sampler": FakePrioritizedConfig(alpha=0.5)}


def test_the_buffers_own_options_stay_valid_with_any_part() -> None:
    config = build(
        file_data={"buffer": {"stack_num": 4}}, flags={"buffer": {"name": "prioritized"}}
    )
    assert config.buffer.stack_num == 4
    message = config_error(file_data={"buffer": {"alpah": 0.5, "sampler": "prioritized"}})
    assert message.startswith("$.buffer.alpah: unknown field; did you mean 'alpha'?")


def test_a_part_named_in_the_wrong_slot_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="'replay' is a layout, not a sampler"):
        build(overrides=["buffer.sampler=replay"])


def test_options_the_algo_defaults_bring_for_a_part_switched_off_are_dropped() -> None:
    # an algorithm's defaults may tune a part (Rainbow's prioritized sampler); switching the
    # part off must just work, while options the user wrote for an absent part are reported
    assert build("prio-dqn").buffer.options == {"sampler": FakePrioritizedConfig(alpha=0.7)}
    assert not build("prio-dqn", overrides=["buffer.name=replay"]).buffer.options
    message = config_error("buffer.name=replay", "buffer.alpha=0.5", algo="prio-dqn")
    assert message == (
        "$.buffer.alpha: unknown field; fields of buffer (replay): "
        "name, size, sampler, relabel, writer, stack_num, ignore_obs_next, storage, path, "
        "dataset"
    )


def test_env_backend_options_follow_the_backend() -> None:
    assert build().env.options is None
    config = build(overrides=["env.backend=shmem", "env.context=spawn"])
    assert config.env.options == FakeShmemConfig(context="spawn")
    assert config_error("env.context=spawn") == (
        "$.env.context: unknown field; fields of env (dummy): "
        "id, num_envs, num_test_envs, backend, make_kwargs, wrappers, train_wrappers, factory, "
        "info_keys, "
        "policy_mapping"
    )


def test_an_unknown_plugin_name_raises_the_lookups_own_error() -> None:
    for override in ["buffer.name=nope", "env.backend=nope"]:
        with pytest.raises(UnknownComponentError, match="nope"):
            build(overrides=[override])
    with pytest.raises(UnknownComponentError, match="ppo"):
        build("ppo")


def test_a_plugin_config_field_clashing_with_the_section_is_reported() -> None:
    message = config_error("buffer.name=clashing")
    assert message.startswith(
        "$.buffer: buffer part 'clashing' has a config field 'size' that clashes with the buffer "
        "section"
    )


def test_structure_options_checks_keyword_options_like_files() -> None:
    built = structure_options(FakePrioritizedConfig, {"alpha": 1}, label="buffer (prioritized)")
    assert built == FakePrioritizedConfig(alpha=1.0)
    with pytest.raises(ConfigError) as info:
        structure_options(FakeDQNConfig, {"lrr": 1, "gamma": "x"}, label="algo (dqn)")
    assert str(info.value).splitlines() == [
        "$.lrr: unknown field; did you mean 'lr'? fields of algo (dqn): lr, gamma, hidden",
        "$.gamma: expected float, got 'x'",
    ]


# --- files -------------------------------------------------------------------------------------


def test_a_toml_file_feeds_build_config(tmp_path: Path) -> None:
    path = tmp_path / "run.toml"
    path.write_text(
        '[algo]\nlr = 3e-4\n[env]\nid = "Pendulum-v1"\n[buffer]\nname = "prioritized"\n'
        "alpha = 0.9\n[trainer]\nmax_env_steps = 1e5\n"
    )
    config = build(file_data=load_config_file(path))
    assert config.algo.lr == 3e-4
    assert config.env.id == "Pendulum-v1"
    assert config.buffer.options == {"sampler": FakePrioritizedConfig(alpha=0.9)}
    assert config.trainer.max_env_steps == 100_000


def test_a_json_file_feeds_build_config(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"run": {"seed": 9, "loggers": ["csv"]}, "algo": {"gamma": 0.5}}))
    config = build(file_data=load_config_file(path))
    assert config.run.seed == 9
    assert config.run.loggers == ["csv"]
    assert config.algo.gamma == 0.5


def test_a_missing_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError, match=r"absent\.toml not found"):
        load_config_file(path)


def test_a_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[algo]\nlr 3e-4\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: invalid TOML: .*line 2"):
        load_config_file(path)


def test_a_json_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "algo": {\n    "lr": ,\n  }\n}\n')
    with pytest.raises(ConfigError, match=r"bad\.json:3:11: invalid JSON: .*line 3"):
        load_config_file(path)


def test_a_json_file_must_hold_an_object(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="top level must be an object of sections, got list"):
        load_config_file(path)


def test_an_unknown_file_format_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("algo: {}")
    with pytest.raises(ConfigError, match=r"unknown format '\.yaml'; use a \.toml or \.json file"):
        load_config_file(path)


# --- writing back ------------------------------------------------------------------------------


def test_to_dict_is_the_flat_json_safe_form() -> None:
    config = build(overrides=["buffer.name=prioritized", "buffer.alpha=0.5"])
    data = to_dict(config)
    assert data["algo_name"] == "dqn"
    assert data["algo"] == {"lr": 1e-3, "gamma": 0.99, "hidden": [64, 64]}
    assert data["buffer"] == {
        "name": "prioritized", "size": 5000, "sampler": None, "relabel": None, "writer": None,
        "stack_num": 1, "ignore_obs_next": False, "storage": "memory", "path": None,
        "dataset": None, "alpha": 0.5, "beta": 0.4,
    }
    assert "options" not in data["env"]
    assert json.loads(json.dumps(data)) == data


def test_to_dict_of_an_algorithm_without_options_has_an_empty_algo_table() -> None:
    assert to_dict(build("noconf"))["algo"] == {}


def test_write_config_replaces_the_file_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "run" / "config.json"
    write_config(build(overrides=["run.seed=1"]), path)
    write_config(build(overrides=["run.seed=2"]), path)
    assert json.loads(path.read_text())["run"]["seed"] == 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.json", "config.json.sha256"]


def test_read_config_needs_algo_name(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"run": {"seed": 1}}))
    with pytest.raises(ConfigError, match=r"\$\.algo_name"):
        read_config(path, lookup)


def test_read_config_reports_field_errors_with_paths(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"algo_name": "dqn", "run": {"seed": "one"}}))
    with pytest.raises(ConfigError, match=r"^\$\.run\.seed: expected int, got 'one'$"):
        read_config(path, lookup)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    lr=st.floats(1e-8, 10.0),
    batch_size=st.integers(1, 10_000),
    stop_reward=st.none() | st.floats(allow_nan=False, allow_infinity=False),
    loggers=st.lists(st.sampled_from(["csv", "tensorboard", "wandb"]), max_size=3),
    prioritized=st.booleans(),
    alpha=st.floats(0.0, 1.0),
    make_kwargs=st.dictionaries(st.sampled_from(["a", "b"]), st.integers() | st.text()),
)
def test_write_then_read_gives_the_same_config(
    seed: int,
    lr: float,
    batch_size: int,
    stop_reward: float | None,
    loggers: list[str],
    prioritized: bool,
    alpha: float,
    make_kwargs: dict[str, Any],
) -> None:
    buffer: dict[str, Any] = {"name": "prioritized", "alpha": alpha} if prioritized else {}
    config = build(
        flags={
            "run": {"seed": seed, "loggers": loggers},
            "algo": {"lr": lr},
            "trainer": {"batch_size": batch_size, "stop_reward": stop_reward},
            "buffer": buffer,
            "env": {"make_kwargs": make_kwargs, "backend": "shmem"},
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        write_config(config, path)
        again = read_config(path, lookup)
    assert again == config
    assert to_dict(again) == to_dict(config)


def test_env_defaults_apply_when_the_env_id_matches() -> None:
    plain = build("envwise")
    assert (plain.trainer.batch_size, plain.trainer.max_env_steps) == (32, 1000)
    cheetah = build("envwise", flags={"env": {"id": "HalfCheetah-v5"}})
    # both patterns match; the later, more specific one wins where they overlap
    assert (cheetah.trainer.batch_size, cheetah.trainer.max_env_steps) == (64, 3000)
    assert cheetah.env.num_envs == 4
    other = build("envwise", overrides=["env.id='HalfCheetah-v4'"])
    assert (other.trainer.batch_size, other.trainer.max_env_steps) == (64, 1000)


def test_user_values_beat_env_defaults() -> None:
    config = build(
        "envwise",
        file_data={"env": {"id": "HalfCheetah-v5"}, "trainer": {"batch_size": 8}},
        overrides=["env.num_envs=2"],
    )
    assert config.trainer.batch_size == 8
    assert config.env.num_envs == 2
    assert config.trainer.max_env_steps == 3000


def test_multi_env_runs_default_to_the_vector_buffer_when_it_is_installed() -> None:
    vector = BufferSpec(name="vector", summary="", impl="fake:Vector")

    def with_vector(kind: str, name: str) -> PluginSpec:
        return vector if (kind, name) == ("buffer", "vector") else lookup(kind, name)

    def name_of(**kwargs: Any) -> str:
        return build_config("dqn", spec_lookup=with_vector, **kwargs).buffer.name

    assert name_of() == "vector"  # 8 training envs by default
    assert name_of(overrides=["env.num_envs=1"]) == "replay"
    assert name_of(overrides=["buffer.name=replay"]) == "replay"  # a chosen buffer wins
    assert build_config("prio-dqn", spec_lookup=with_vector).buffer.name == "prioritized"
    assert build().buffer.name == "replay"  # vector not installed: the base buffer
