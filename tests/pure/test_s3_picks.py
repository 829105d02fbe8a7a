"""Which model under an S3 prefix `gitops models resolve` pins, offline: the
entries a listing makes (files, directories, folder markers), `--match`, `--kind`,
the newest and highest-version rules and their ties, and the lines printed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from vocabulary.replicas.model_digests import source_problem
from vocabulary.replicas.s3_picks import (
    Candidate,
    Listed,
    NoPick,
    candidates,
    compile_match,
    parse_s3_prefix,
    pick,
    pin_lines,
    pinned_source,
    store_error_line,
    version_of,
)

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _files(*names: str) -> list[Candidate]:
    return [Candidate(name, _at(index)) for index, name in enumerate(names)]


def test_a_prefix_parses_to_its_bucket_and_key_and_anything_else_is_refused() -> None:
    assert parse_s3_prefix("s3://models/sentiment/") == ("models", "sentiment/")
    assert parse_s3_prefix("s3://models/a%20b/") == ("models", "a b/")
    assert parse_s3_prefix("s3://models/") == ("models", "")
    with pytest.raises(ValueError, match="ending in '/'"):
        parse_s3_prefix("s3://models/sentiment/v3.onnx")
    with pytest.raises(ValueError, match=r"s3://BUCKET/PREFIX/"):
        parse_s3_prefix("gs://models/x/")
    with pytest.raises(ValueError, match="credentials"):
        parse_s3_prefix("s3://key:secret@models/x/")


def test_a_listing_makes_files_and_directories_and_a_directorys_time_is_its_newest_objects() -> None:
    listed = [
        Listed("model-1.onnx", 10, _at(1)),
        Listed("v3", 0, _at(0)),  # the folder marker v3/, listed without its '/'
        Listed("v3/config.json", 2, _at(5)),
        Listed("v3/sub/weights.bin", 99, _at(9)),
        Listed("v10/weights.bin", 99, _at(2)),
        Listed("empty", 0, _at(3)),  # an empty file, not a marker: no v3/empty/ under it
    ]
    assert candidates(listed) == [
        Candidate("empty", _at(3)),
        Candidate("model-1.onnx", _at(1)),
        Candidate("v10/", _at(2)),
        Candidate("v3/", _at(9)),
    ]
    assert Candidate("v3/", T0).is_directory and not Candidate("v3", T0).is_directory


def test_newest_picks_the_entry_last_modified_latest() -> None:
    assert pick(_files("b.onnx", "a.onnx", "c.onnx"), "newest").name == "c.onnx"
    folders = [Candidate("v9/", _at(5)), Candidate("v10/", _at(1))]
    assert pick(folders, "newest").name == "v9/"


def test_highest_version_compares_the_numbers_in_order_not_the_text() -> None:
    assert version_of("v10/") == (10,)
    assert version_of("sentiment-1.10.0.onnx") == (1, 10, 0)
    assert version_of("2026-11-20/") == (2026, 11, 20)
    assert version_of("latest.onnx") is None
    assert pick(_files("v2/", "v10/", "v9/"), "highest-version").name == "v10/"
    assert pick(_files("m-1.10.0.onnx", "m-1.9.3.onnx"), "highest-version").name == "m-1.10.0.onnx"
    assert pick(_files("2026-12-01/", "2026-11-20/"), "highest-version").name == "2026-12-01/"
    # A name without a number is passed over, not an error while another has one.
    assert pick(_files("README", "m-2.onnx", "m-1.onnx"), "highest-version").name == "m-2.onnx"


def test_a_version_group_reads_only_its_text() -> None:
    # The 3 in "bert3" would otherwise count first.
    match = compile_match(r"bert3-(?P<version>[0-9.]+)\.onnx$")
    assert version_of("bert3-1.2.onnx", match) == (1, 2)
    assert pick(_files("bert3-1.10.onnx", "bert3-1.9.onnx"), "highest-version", match).name == "bert3-1.10.onnx"
    first = compile_match(r"^r(\d+)-")
    assert version_of("r7-2026.onnx", first) == (7,)


def test_match_selects_the_candidates_and_kind_one_of_the_kinds() -> None:
    entries = _files("m-3.onnx.sha256", "m-2.onnx", "m-1.onnx", "v4/")
    match = compile_match(r"\.onnx$")
    assert pick(entries, "newest", match).name == "m-1.onnx"
    assert pick(entries, "highest-version", match).name == "m-2.onnx"
    assert pick(entries, "newest", kind="directory").name == "v4/"
    assert pick(entries, "highest-version", kind="file").name == "m-3.onnx.sha256"
    with pytest.raises(NoPick, match="both files .* and directories .*: pass --kind file or --kind directory"):
        pick(entries, "newest")


def test_no_candidate_a_tie_or_no_version_is_an_error_that_says_why() -> None:
    with pytest.raises(NoPick, match="no object under the prefix"):
        pick([], "newest")
    with pytest.raises(NoPick, match=r"none of the 2 entries under the prefix matches --match '\\.bin\$'"):
        pick(_files("a.onnx", "b.onnx"), "newest", compile_match(r"\.bin$"))
    with pytest.raises(NoPick, match="no directory under the prefix"):
        pick(_files("a.onnx"), "newest", kind="directory")
    same = [Candidate("a.onnx", T0), Candidate("b.onnx", T0), Candidate("c.onnx", _at(-1))]
    with pytest.raises(NoPick, match="a.onnx, b.onnx were last modified at the same time"):
        pick(same, "newest")
    with pytest.raises(NoPick, match="v1/, V1/ have the same version 1"):
        pick(_files("v1/", "V1/"), "highest-version")
    with pytest.raises(NoPick, match="none of the 2 entries has a version number in its name: latest, stable"):
        pick(_files("latest", "stable"), "highest-version")


def test_a_bad_regex_says_so() -> None:
    with pytest.raises(ValueError, match=r"--match '\(v': not a regular expression"):
        compile_match("(v")
    assert compile_match(None) is None


def test_the_pinned_source_names_the_entry_and_is_a_source_a_spec_takes() -> None:
    assert pinned_source("models", "sentiment/", Candidate("v3/", T0)) == "s3://models/sentiment/v3/"
    assert pinned_source("models", "", Candidate("m-1.onnx", T0)) == "s3://models/m-1.onnx"
    odd = pinned_source("models", "a b/", Candidate("m#1?.onnx", T0))
    assert odd == "s3://models/a%20b/m%231%3F.onnx"
    assert source_problem(odd) is None and parse_s3_prefix(odd.rpartition("/")[0] + "/") == ("models", "a b/")


def test_the_lines_printed_are_toml_ready_to_paste() -> None:
    import tomllib

    text = pin_lines("s3://models/sentiment/v3/", "ab" * 32)
    assert text == f'source = "s3://models/sentiment/v3/"\nsha256 = "{"ab" * 32}"\n'
    assert tomllib.loads(pin_lines('s3://m/"q"\\', "0" * 64, {"include": ["*.json"], "exclude": []})) == {
        "source": 's3://m/"q"\\', "sha256": "0" * 64, "include": ["*.json"]}


def test_a_stores_error_reads_as_one_short_phrase() -> None:
    assert store_error_line("Generic S3 error: ... 404 Not Found: <Code>NoSuchBucket</Code>\n\nDebug source:\nGeneric {")\
        == "no such bucket"
    assert store_error_line("Server returned non-2xx status code: 403 Forbidden: <Code>AccessDenied</Code>") \
        == "access denied (403): check the AWS_* credentials"
    assert store_error_line("request timed out") == "timed out"
    assert store_error_line("boom\n  Debug source: secret internals") == "boom"
