"""The TOML locator: key paths of the spec format map to their line and column."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gitops.specs.locating import cannot_nest_deeper, locate, locate_later

SPEC = '''# a comment with [brackets] and key = "value"
[backends.echo-v1]
import_path = "deployments.apps.echo:Echo"  # trailing comment
init_args = ["hello", { a = 1 }]
user_config = { greeting = "hi", "quoted key" = [1,
   2] }
notes = """multi-line
[backends.fake]
"""
ray_actor_options.num_cpus = 0.1

[backends."echo-v2".autoscaling]
max_replicas = 8

[endpoints.echo]
route = "/echo"
traffic = { echo-v1 = 0.9, 'echo-v2' = 0.1 }
'''

LOCATIONS = locate(SPEC)


def test_a_table_header_is_located_at_its_bracket() -> None:
    assert LOCATIONS.find(("backends", "echo-v1")) == (2, 1)


def test_a_key_is_located_at_its_first_character() -> None:
    assert LOCATIONS.find(("backends", "echo-v1", "import_path")) == (3, 1)


def test_array_elements_and_inline_table_keys_are_located() -> None:
    assert LOCATIONS.find(("backends", "echo-v1", "init_args", 1)) == (4, 23)
    assert LOCATIONS.find(("backends", "echo-v1", "init_args", 1, "a")) == (4, 25)


def test_quoted_keys_and_multi_line_arrays_are_located() -> None:
    assert LOCATIONS.find(("backends", "echo-v1", "user_config", "quoted key", 1)) == (6, 4)


def test_headers_inside_multi_line_strings_are_not_tables() -> None:
    assert ("backends", "fake") not in LOCATIONS.positions


def test_dotted_keys_locate_each_level() -> None:
    assert LOCATIONS.find(("backends", "echo-v1", "ray_actor_options")) == (10, 1)
    assert LOCATIONS.find(("backends", "echo-v1", "ray_actor_options", "num_cpus")) == (10, 1)


def test_quoted_header_parts_are_located() -> None:
    assert LOCATIONS.find(("backends", "echo-v2", "autoscaling", "max_replicas")) == (13, 1)


def test_inline_traffic_weights_are_located() -> None:
    assert LOCATIONS.find(("endpoints", "echo", "traffic", "echo-v2")) == (17, 28)


def test_a_path_not_written_falls_back_to_its_nearest_parent() -> None:
    assert LOCATIONS.find(("endpoints", "echo", "methods")) == (15, 1)


def test_a_path_with_no_written_parent_falls_back_to_the_first_line() -> None:
    assert LOCATIONS.find(("nothing",)) == (1, 1)


def test_arrays_of_tables_are_indexed() -> None:
    found = locate("[[x]]\na = 1\n[[x]]\na = 2\n")
    assert found.find(("x", 1, "a")) == (4, 1)


def test_text_tomllib_would_reject_never_raises() -> None:
    assert locate('a = "unterminated\n[b\n= {').find(("b",)) == (1, 1)


def test_an_array_holding_a_stray_closer_ends_the_scan() -> None:
    # Once an array took "}" as an endless run of empty values and filled memory.
    assert locate("a = [}]\nb = 1\n").positions == {("a",): (1, 1), ("a", 0): (1, 6)}


# TOML documents of headers, array-of-table headers and key/values whose
# keys are dotted (quoted parts hold dots too) and whose values nest arrays
# and inline tables: every way a key path grows.
_KEY = st.lists(st.sampled_from(["a", "b", '"q.d"', "'[x]'"]), min_size=1, max_size=4).map(".".join)
_VALUE = st.recursive(
    st.sampled_from(["1", '"s"', "1.5", '"{["']),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda items: "[" + ", ".join(items) + "]"),
        st.lists(st.tuples(_KEY, inner), max_size=3).map(
            lambda pairs: "{" + ", ".join(f"{key} = {value}" for key, value in pairs) + "}"
        ),
    ),
    max_leaves=8,
)
_LINE = st.one_of(
    _KEY.map(lambda key: f"[{key}]"),
    _KEY.map(lambda key: f"[[{key}]]"),
    st.tuples(_KEY, _VALUE).map(lambda pair: f"{pair[0]} = {pair[1]}  # [.{{"),
)
_TOMLISH = st.one_of(st.lists(_LINE, max_size=5).map("\n".join), st.text(alphabet=list('ab.[]{}=,"\'#\n 1'), max_size=80))


@settings(max_examples=400, deadline=None)
@given(_TOMLISH, st.integers(min_value=1, max_value=12))
def test_a_text_the_cheap_bound_clears_never_trips_the_nesting_guard(text: str, max_depth: int) -> None:
    if cannot_nest_deeper(text, max_depth):
        assert locate(text, max_depth).too_deep is None


def test_the_cheap_bound_does_not_clear_a_deeply_dotted_key() -> None:
    assert not cannot_nest_deeper("a" + ".a" * 40 + " = 1\n", 32)


@settings(max_examples=200, deadline=None)
@given(_TOMLISH)
def test_lazy_locations_find_what_an_eager_scan_finds(text: str) -> None:
    eager, lazy = locate(text), locate_later(text)
    for path in [*eager.positions, ("a",), ("a", "b"), ("nowhere",)]:
        assert lazy.find(path) == eager.find(path)
