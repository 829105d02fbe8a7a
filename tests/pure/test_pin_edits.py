"""Artifact automation's edit of a spec file (`gitops.specs.pins.pin_edits`): the new pin
replaces the value's literal on its line and nothing else; comments, order, blank
lines and other keys stay byte for byte, and the diff is exactly the changed lines."""

from __future__ import annotations

import difflib
import tomllib

import pytest

from gitops.specs.pins.pin_edits import PinEditError, declared_model, edit_pin

OLD = "a" * 64
NEW = "b" * 64

SPEC = f"""\
# Sentiment: the model our pipeline publishes under s3://models/sentiment/.
[models.sentiment]
source = "s3://models/sentiment/v3/"   # moved by automation.sentiment
sha256 = "{OLD}"   # the manifest digest
load_timeout_s = 60

# A second model that must not move.
[models.other]
source = 's3://models/other/'
sha256 = "{OLD}"

[backends.sentiment]
import_path = "apps.sentiment:Sentiment"
models = ["sentiment"]   # keep
"""


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
    ]


def test_only_the_digest_line_differs_and_comments_stay() -> None:
    edited = edit_pin(SPEC, "sentiment", {"sha256": NEW, "source": "s3://models/sentiment/v3/"})
    assert changed_lines(SPEC, edited) == [
        f'-sha256 = "{OLD}"   # the manifest digest',
        f'+sha256 = "{NEW}"   # the manifest digest',
    ]
    assert tomllib.loads(edited)["models"]["other"]["sha256"] == OLD


def test_a_new_source_changes_its_line_too_and_nothing_else() -> None:
    edited = edit_pin(SPEC, "sentiment", {"sha256": NEW, "source": "s3://models/sentiment/v4/"})
    assert changed_lines(SPEC, edited) == [
        '-source = "s3://models/sentiment/v3/"   # moved by automation.sentiment',
        f'-sha256 = "{OLD}"   # the manifest digest',
        '+source = "s3://models/sentiment/v4/"   # moved by automation.sentiment',
        f'+sha256 = "{NEW}"   # the manifest digest',
    ]


def test_a_literal_string_is_rewritten_as_a_basic_one_on_its_line() -> None:
    edited = edit_pin(SPEC, "other", {"sha256": NEW, "source": "s3://models/other/v2/"})
    assert changed_lines(SPEC, edited) == [
        "-source = 's3://models/other/'",
        f'-sha256 = "{OLD}"',
        '+source = "s3://models/other/v2/"',
        f'+sha256 = "{NEW}"',
    ]


def test_dotted_keys_and_inline_tables_are_edited_in_place() -> None:
    text = f'models.a.source = "s3://m/a/"\nmodels.a.sha256 = "{OLD}" # pinned\n' \
           f'models.c = {{ source = "s3://m/c/", sha256 = "{OLD}" }}  # inline\n'
    dotted = edit_pin(text, "a", {"sha256": NEW})
    assert changed_lines(text, dotted) == [f'-models.a.sha256 = "{OLD}" # pinned', f'+models.a.sha256 = "{NEW}" # pinned']
    inline = edit_pin(text, "c", {"sha256": NEW})
    assert changed_lines(text, inline) == [
        f'-models.c = {{ source = "s3://m/c/", sha256 = "{OLD}" }}  # inline',
        f'+models.c = {{ source = "s3://m/c/", sha256 = "{NEW}" }}  # inline',
    ]


def test_the_same_pin_leaves_the_file_as_it_is() -> None:
    assert edit_pin(SPEC, "sentiment", {"sha256": OLD, "source": "s3://models/sentiment/v3/"}) == SPEC


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (SPEC, "declares no [models.missing]"),
        (f'[models.missing]\nsource = "s3://m/x/"\nsha256 = """{OLD}"""\n', "only a one-line string literal"),
        ('[models.missing]\nsource = "s3://m/x/"\nsha256 = 1\n', "is not a string"),
        ("[models.missing\n", "not valid TOML"),
    ],
)
def test_what_cannot_be_edited_is_refused_and_nothing_written(text: str, said: str) -> None:
    with pytest.raises(PinEditError, match=said.replace("[", r"\[").replace("]", r"\]")):
        edit_pin(text, "missing", {"sha256": NEW})


def test_declared_model_reads_the_table_as_written() -> None:
    found = declared_model("deployments/s.toml", SPEC, "sentiment")
    assert found is not None
    assert (found.path, found.source, found.sha256) == ("deployments/s.toml", "s3://models/sentiment/v3/", OLD)
    assert declared_model("deployments/s.toml", SPEC, "nope") is None
    assert declared_model("x.toml", "not toml [", "sentiment") is None
