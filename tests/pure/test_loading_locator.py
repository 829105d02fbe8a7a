"""The TOML locator: key paths of the spec format map to their line and column."""

from __future__ import annotations

from gitops.specs.locating import locate

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
