"""The static import-path check: module files and module-level names, never imported."""

from __future__ import annotations

import pytest

from gitops.sources.trees import MemoryTree
from gitops.specs.imports import AttributeKind, resolve_import

MODULE = '''
import os as operating_system
from json import loads as parse
try:
    import fast
except ImportError:
    fast = None
if True:
    class Guarded:
        async def __call__(self, request): ...
class NoCall: ...
class Inherits(Base): ...
class Assigned:
    __call__ = staticmethod(len)
def handler(request): ...
async def async_handler(request): ...
first, second = 1, 2
def outer():
    class Hidden: ...
'''

TREE = MemoryTree(
    {
        "apps/mod.py": MODULE,
        "apps/pkg/__init__.py": "from .impl import *\n",
        "apps/both.py": "FROM_MODULE = 1\n",
        "apps/both/__init__.py": "FROM_PACKAGE = 1\n",
        "apps/broken.py": "def broken(:\n",
        "apps/warns.py": "PATTERN = '\\d'\n",
    }
)


@pytest.mark.parametrize(
    ("attribute", "kind"),
    [
        ("Guarded", AttributeKind.CLASS),
        ("Inherits", AttributeKind.CLASS),
        ("Assigned", AttributeKind.CLASS),
        ("handler", AttributeKind.FUNCTION),
        ("async_handler", AttributeKind.FUNCTION),
        ("operating_system", AttributeKind.UNKNOWN),
        ("parse", AttributeKind.UNKNOWN),
        ("fast", AttributeKind.UNKNOWN),
        ("second", AttributeKind.UNKNOWN),
    ],
)
def test_module_level_names_are_found_with_their_kind(attribute: str, kind: AttributeKind) -> None:
    resolved = resolve_import(TREE, f"apps.mod:{attribute}")
    assert resolved.error is None and resolved.kind is kind and resolved.module_file == "apps/mod.py"


def test_a_name_defined_only_inside_a_function_is_not_found() -> None:
    assert resolve_import(TREE, "apps.mod:Hidden").error == "'Hidden' is not defined at module level in apps/mod.py"


def test_a_class_without_bases_must_define_call() -> None:
    assert resolve_import(TREE, "apps.mod:NoCall").error == (
        "class 'NoCall' in apps/mod.py has no __call__ method to handle requests"
    )


def test_a_star_import_makes_any_name_possible() -> None:
    assert resolve_import(TREE, "apps.pkg:anything").kind is AttributeKind.UNKNOWN


def test_a_package_wins_over_a_module_of_the_same_name() -> None:
    assert resolve_import(TREE, "apps.both:FROM_PACKAGE").error is None
    assert resolve_import(TREE, "apps.both:FROM_MODULE").error is not None


def test_a_missing_module_names_the_files_it_looked_for() -> None:
    assert resolve_import(TREE, "apps.gone:x").error == (
        "module 'apps.gone' not found (no apps/gone/__init__.py or apps/gone.py)"
    )


def test_a_module_that_does_not_parse_is_an_error_with_its_line() -> None:
    assert resolve_import(TREE, "apps.broken:broken").error == "apps/broken.py:1: cannot parse: invalid syntax"


def test_warnings_about_user_code_do_not_escape() -> None:
    assert resolve_import(TREE, "apps.warns:PATTERN").error is None
