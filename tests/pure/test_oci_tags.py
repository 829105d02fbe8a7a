"""Which tag of an OCI repository `pick = "semver"` follows (`vocabulary.replicas.oci_tags`):
semver precedence, `match`, pre-releases only when match finds them, ties refused;
and the tag list's pages, whose next page must stay on the registry that was named."""

from __future__ import annotations

import re

import pytest

from vocabulary.replicas.oci_sources import OciReference
from vocabulary.replicas.oci_tags import NoTag, SemVer, next_page, page_tags, parse_semver, pick_tag, tags_url


def test_a_semantic_version_with_an_optional_v_and_nothing_else_is_one() -> None:
    assert parse_semver("v1.4.0") == SemVer(1, 4, 0)
    assert parse_semver("1.5.0-rc.1+build.7") == SemVer(1, 5, 0, ("rc", "1"))
    for tag in ("latest", "1.4", "01.2.3", "1.2.3-01", "sha-3f2a9c", "v1.2.3.4", "1.2.3-", "V1.2.3"):
        assert parse_semver(tag) is None, tag


def test_the_highest_release_is_picked_by_precedence_not_by_text() -> None:
    tags = ["latest", "v1.9.0", "v1.10.0", "v1.10.0-rc.1", "v2.0.0-beta", "sha-abc", "v0.99.99"]
    assert pick_tag(tags, "semver") == "v1.10.0"  # 10 > 9; pre-releases left out without match


def test_match_filters_and_lets_in_the_pre_releases_it_reaches_into() -> None:
    tags = ["v1.9.0", "v1.10.0", "v2.0.0", "v2.1.0-rc.1", "v2.1.0-rc.2", "v2.1.0-rc.10", "v2.1.0-beta.3"]
    assert pick_tag(tags, "semver", re.compile(r"^v1\.")) == "v1.10.0"
    assert pick_tag(tags, "semver", re.compile(r"^v2\.")) == "v2.0.0"  # it stops before any '-'
    assert pick_tag(tags, "semver", re.compile(r"^v2\..*-")) == "v2.1.0-rc.10"  # rc.10 > rc.2 > beta.3
    assert pick_tag(tags, "semver", re.compile(r"-rc\.")) == "v2.1.0-rc.10"
    assert pick_tag(tags + ["v2.1.0"], "semver", re.compile(".*")) == "v2.1.0"  # the release above its rcs


def test_pre_release_precedence_is_semvers() -> None:
    order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
             "1.0.0-rc.1", "1.0.0"]
    keys = [parse_semver(tag).key() for tag in order]  # type: ignore[union-attr]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


def test_no_candidate_or_a_tie_is_an_error_that_says_why() -> None:
    with pytest.raises(NoTag, match="no tag"):
        pick_tag([], "semver")
    with pytest.raises(NoTag, match=r"none of its 2 tags matches '\^v3': latest, v1.0.0"):
        pick_tag(["latest", "v1.0.0"], "semver", re.compile("^v3"))
    with pytest.raises(NoTag, match=r"none of its 2 tags is a release MAJOR.MINOR.PATCH \(a pre-release counts "
                                    r"only when match reaches into its '-'\): latest, v1.0.0-rc.1"):
        pick_tag(["latest", "v1.0.0-rc.1"], "semver")
    with pytest.raises(NoTag, match="is a semantic version MAJOR.MINOR.PATCH: latest, stable"):
        pick_tag(["latest", "stable"], "semver")
    with pytest.raises(NoTag, match=r"1.4.0, v1.4.0 are the same version 1.4.0: narrow them with match"):
        pick_tag(["1.4.0", "v1.4.0", "1.3.0"], "semver")
    with pytest.raises(NoTag, match=r"1.4.0\+a, 1.4.0\+b are the same version"):
        pick_tag(["1.4.0+a", "1.4.0+b"], "semver")
    with pytest.raises(NoTag, match="pick must be one of semver, highest-version"):
        pick_tag(["v1.0.0"], "newest")


def test_highest_version_reads_the_numbers_in_a_tag_as_numbers() -> None:
    assert pick_tag(["build-9", "build-10", "build-2", "latest"], "highest-version") == "build-10"
    assert pick_tag(["2026-12-03", "2026-12-04", "2026-11-30"], "highest-version") == "2026-12-04"
    assert pick_tag(["v1.9", "v1.10", "v1.2.7"], "highest-version") == "v1.10"  # (1, 10) > (1, 9) > (1, 2, 7)


def test_highest_version_reads_only_the_version_group_of_match() -> None:
    tags = ["main-20261204093000-3f2a9c1", "main-20261203120000-aaaaaaa", "pr-7-20271231000000-bbbbbbb", "latest"]
    timestamp = re.compile(r"^main-(?P<version>[0-9]{14})-")
    assert pick_tag(tags, "highest-version", timestamp) == "main-20261204093000-3f2a9c1"
    # Without a group every number of the tag counts, in order: pr-7-2027… is version (7, 2027…), below main's.
    assert pick_tag(tags, "highest-version", re.compile("^(?:main|pr)-")) == "main-20261204093000-3f2a9c1"
    first_group = re.compile(r"^main-([0-9]{8})")
    assert pick_tag(tags, "highest-version", first_group) == "main-20261204093000-3f2a9c1"


def test_highest_version_with_no_number_or_a_tie_says_why() -> None:
    with pytest.raises(NoTag, match="none of its 2 tags has a version number: latest, stable"):
        pick_tag(["latest", "stable"], "highest-version")
    with pytest.raises(NoTag, match=r"build-07, build-7 have the same version 7: narrow them with match"):
        pick_tag(["build-7", "build-07"], "highest-version")
    with pytest.raises(NoTag, match=r"none of its 1 tag matching has a version number"):
        pick_tag(["main-x", "v1"], "highest-version", re.compile(r"^main-(?P<version>.*)$"))


def test_a_page_of_tags_and_the_link_to_the_next_one() -> None:
    reference = OciReference("127.0.0.1:5000", "acme/sentiment")
    first = tags_url(reference, 2)
    assert first == "http://127.0.0.1:5000/v2/acme/sentiment/tags/list?n=2"
    assert tags_url(OciReference("registry.example.com", "acme/x")).startswith("https://registry.example.com/v2/")
    assert page_tags(b'{"name": "acme/sentiment", "tags": ["v1.0.0", "v1.1.0"]}') == ["v1.0.0", "v1.1.0"]
    assert page_tags(b'{"name": "acme/sentiment", "tags": null}') == []
    for bad in (b"<html>", b'{"tags": "v1"}', b'{"tags": [1]}', b"[]"):
        with pytest.raises(ValueError, match="tag list"):
            page_tags(bad)
    link = '</v2/acme/sentiment/tags/list?last=v1.1.0&n=2>; rel="next"'
    assert next_page(first, link) == "http://127.0.0.1:5000/v2/acme/sentiment/tags/list?last=v1.1.0&n=2"
    assert next_page(first, None) is None
    assert next_page(first, '</v2/acme/sentiment/tags/list?n=2>; rel="prev"') is None
    with pytest.raises(ValueError, match="on another host"):
        next_page(first, '<http://127.0.0.2:5000/v2/acme/sentiment/tags/list?last=x>; rel="next"')
    with pytest.raises(ValueError, match="on another host"):
        next_page("https://registry.example.com/v2/a/tags/list", '<http://registry.example.com/v2/a/tags/list>; rel=next')
