"""Config parsing under random input: any override of any field of any installed algorithm either
builds a config or raises ConfigError (one line per problem, each with its field path), never
another exception; and what a dry run builds from such a config (env, buffer, policy) is built
or refused with an rlblocks error."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlblocks.contracts import ConfigError, UnknownComponentError
from rlblocks.plugins import get_registry
from rlblocks.run import build_config, spec_lookup, structure_options

# a plugin whose spec fails to load (a broken install) is `rlblocks list`'s to report
ALGOS = sorted(get_registry("algo").loadable_specs())
SECTIONS = ("env", "buffer", "trainer", "run")

#: plugin-naming fields: an unknown name is the registry's UnknownComponentError, by design
PLUGIN_NAMES = {("buffer", "name"), ("env", "backend")}


def _fields(algo: str) -> list[tuple[str, str]]:
    config = spec_lookup("algo", algo).config
    base = build_config(algo, spec_lookup=spec_lookup)
    paths = [("algo", a.name) for a in attrs.fields(config)] if config else []
    for section in SECTIONS:
        paths += [(section, a.name) for a in attrs.fields(type(getattr(base, section)))]
    return [p for p in paths if p not in PLUGIN_NAMES and p[1] != "options"]


FIELDS = {algo: _fields(algo) for algo in ALGOS}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _as_text(value: Any) -> str:
    """How a user might write ``value`` after ``=`` (TOML-ish, JSON, or bare words)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # nan, inf, -inf: TOML spells them so
    if isinstance(value, str):
        return value
    return json.dumps(value)


@st.composite
def overrides(draw: st.DrawFn) -> tuple[str, list[str]]:
    algo = draw(st.sampled_from(ALGOS))
    lines = []
    for _ in range(draw(st.integers(1, 3))):
        section, name = draw(st.sampled_from(FIELDS[algo]))
        path = draw(st.sampled_from([f"{section}.{name}", f"{section}.{name}.x", section]))
        value = draw(st.one_of(values.map(_as_text), st.text(max_size=20)))
        lines.append(f"{path}={value}")
    if draw(st.booleans()):
        lines.append(draw(st.text(max_size=20)))  # anything at all, '=' or not
    return algo, lines


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=overrides())
def test_any_override_builds_a_config_or_raises_config_error(case: tuple[str, list[str]]) -> None:
    algo, lines = case
    try:
        build_config(algo, overrides=lines, spec_lookup=spec_lookup)
    except ConfigError as exc:
        message = str(exc)
        assert message and all(line.strip() for line in message.splitlines())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    algo=st.sampled_from(ALGOS),
    data=st.data(),
)
def test_any_keyword_options_build_an_algo_config_or_raise_config_error(algo, data) -> None:
    config = spec_lookup("algo", algo).config
    names = [a.name for a in attrs.fields(config)] + ["not_a_field"]
    options = data.draw(st.dictionaries(st.sampled_from(names), values, max_size=4))
    try:
        structure_options(config, options, label=f"algo ({algo})")
    except ConfigError as exc:
        assert all(line.startswith("$") for line in str(exc).splitlines())


@pytest.mark.parametrize("section, name", sorted(PLUGIN_NAMES))
def test_an_unknown_plugin_name_is_the_registrys_error(section: str, name: str) -> None:
    with pytest.raises(UnknownComponentError):
        build_config("dqn", overrides=[f"{section}.{name}=nosuchplugin"], spec_lookup=spec_lookup)


# -- what a dry run builds: the env, the buffer and the policy ------------------------------------

#: fields whose values reach what a dry run builds (env, buffer, policy), with the values a user
#: might give them: out of range, of the wrong type, absurdly large
BUILT = ("env.num_envs", "buffer.size", "buffer.sampler", "buffer.storage", "buffer.path",
         "buffer.stack_num", "trainer.batch_size", "trainer.update_per_step", "run.seed",
         "algo.n_step", "algo.hidden_sizes", "env.policy_mapping", "trainer.repeat_per_collect",
         "env.wrappers", "env.make_kwargs")  # fmt: skip
# fmt: off
built_values = st.one_of(
    values.map(_as_text),
    st.sampled_from(["1", "0", "-1", "1e12", "2.5", "nan", "200000", "[]", "{}", "sequence",
                     "memmap", "/nonexistent/dir", '{"a"="b"}', "[0]", "[64]", str(2**64)]),
)
# fmt: on


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    algo=st.sampled_from(["dqn", "ppo", "sac", "c51"]),
    lines=st.lists(st.tuples(st.sampled_from(BUILT), built_values), min_size=1, max_size=3),
)
def test_a_dry_run_of_any_override_builds_or_raises_an_rlblocks_error(algo, lines) -> None:
    """`rlblocks train --dry-run` builds the env, the buffer and the policy a run would: any
    override ends in a config that built, or in an rlblocks error, never another exception."""
    from rlblocks.contracts import RlblocksError
    from rlblocks.run import preflight, resolve_train_config

    overrides = [f"{field}={value}" for field, value in lines]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a warned but legal setting is a pass here
        try:
            config = resolve_train_config(algo, overrides=overrides, run_dir="unused")
            preflight(config)
        except RlblocksError as exc:
            assert str(exc).strip()
