"""`automation.toml` checked with FILE:LINE:COL errors (`gitops.specs.pins.automation`), and
artifact automation's pure decisions (`gitops.delivery.automation`): which digests the
history quarantines, and what a commit says."""

from __future__ import annotations

from gitops.delivery.automation import (
    Automation,
    FailedCommit,
    Pin,
    automation_branch,
    commit_message,
    failed_commits,
    quarantined,
    request_body,
)
from gitops.reconcile.outcomes import HistoryEntry, Outcome
from gitops.specs.pins.automation import parse_automation, unknown_models

GOOD = b"""\
# Models our pipelines publish.
[automation.sentiment]
model = "sentiment"
watch = "s3://models/sentiment/"
pick = "highest-version"
match = "^v[0-9]+/$"
interval_s = 60
mode = "pull-request"
provider = "github"
repository = "acme/serving"
api_url = "http://127.0.0.1:9999"

[automation.llm]
model = "llm"
watch = "hf://acme/llm@main"
mode = "commit"
branch = "main"
environment = "dev"

[automation.tiny]
model = "tiny"
watch = "oci://registry.example.com/acme/tiny"
pick = "semver"
match = "^v1[.]"
mode = "commit"

[automation.car]
model = "car"
watch = "oci://registry.example.com/acme/car:stable"
mode = "commit"
"""


def test_a_good_file_reads_as_values() -> None:
    parsed = parse_automation(GOOD)
    assert parsed.errors == ()
    sentiment, llm, tiny, car = parsed.automations
    assert sentiment == Automation(
        name="sentiment", model="sentiment", watch="s3://models/sentiment/", pick="highest-version",
        match="^v[0-9]+/$", interval_s=60.0, mode="pull_request", provider="github", repository="acme/serving",
        api_url="http://127.0.0.1:9999",
    )
    assert (llm.mode, llm.branch, llm.environment, llm.interval_s) == ("commit", "main", "dev", 300.0)
    assert (tiny.watch, tiny.pick, tiny.match) == ("oci://registry.example.com/acme/tiny", "semver", "^v1[.]")
    assert tiny.rule() == "the highest semver tag of oci://registry.example.com/acme/tiny matching '^v1[.]'"
    assert (car.watch, car.pick, car.rule()) == ("oci://registry.example.com/acme/car:stable", None, car.watch)
    assert automation_branch(sentiment) == "gitops/automation-sentiment"
    assert parse_automation(None).automations == ()


def test_errors_are_located_at_their_key() -> None:
    text = b"""\
[automation.a]
model = "a"
watch = "s3://models/a/"
mdoe = "commit"

[automation.b]
model = "b"
mode = "commit"
watch = "oci://registry/b:latest"
match = "^v1"

[automation.c]
model = "c"
watch = "s3://models/c/"
pick = "newest"
mode = "pull_request"

[automation.d]
model = "a"
mode = "commit"
watch = "hf://acme/d@main"
pick = "newest"

[automation.e]
model = "e"
watch = "s3://models/e/"
pick = "newest"
interval_s = 0

[automation.f]
model = "f"
watch = "oci://registry/f"
mode = "commit"

[automation.g]
model = "g"
watch = "oci://registry/g"
pick = "newest"
kind = "file"
mode = "commit"

[automation.h]
model = "h"
watch = "oci://registry/h@sha256:0000000000000000000000000000000000000000000000000000000000000000"
mode = "commit"

[automation.i]
model = "i"
mode = "commit"
watch = "s3://models/i/"
pick = "semver"

[automation.j]
model = "j"
mode = "commit"
watch = "ftp://models/j/"

[automations]
"""
    said = [str(error) for error in parse_automation(text).errors]
    assert said == [
        "automation.toml:58:1: unknown table 'automations' (expected [automation.NAME]) (did you mean 'automation'?)",
        "automation.toml:4:1: automation.a.mdoe: unknown key 'mdoe' (did you mean 'mode'?)",
        "automation.toml:10:1: automation.b.match: is for an oci:// repository's tags (oci://registry/b); "
        "oci://registry/b:latest follows one tag",
        'automation.toml:12:1: automation.c: mode = "pull_request" needs provider ("github" or "gitlab") and repository',
        "automation.toml:22:1: automation.d.pick: is for an s3:// prefix or an oci:// repository; "
        "an hf:// branch names one commit",
        "automation.toml:28:1: automation.e.interval_s: Input should be greater than or equal to 1",
        'automation.toml:30:1: automation.f: an oci:// repository needs pick = "semver" or "highest-version" '
        "(or watch one tag: oci://registry/f:TAG)",
        "automation.toml:38:1: automation.g.pick: an oci:// repository's tags are picked by semver or highest-version",
        "automation.toml:39:1: automation.g.kind: is for an s3:// prefix (files or directories); "
        "an oci:// tag names an image",
        "automation.toml:44:1: automation.h.watch: a digest never moves: watch a tag (oci://registry/h:TAG) "
        'or the repository\'s tags (oci://registry/h with pick = "semver")',
        "automation.toml:51:1: automation.i.pick: an s3:// prefix is picked by newest or highest-version "
        "('semver' picks an oci:// repository's tags)",
        "automation.toml:56:1: automation.j.watch: must be s3://BUCKET/PREFIX/, hf://ORG/NAME@BRANCH, "
        "oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO",
    ]


def test_one_automation_per_model_and_the_model_must_be_declared() -> None:
    text = b'[automation.a]\nmodel = "m"\nwatch = "hf://o/n@main"\nmode = "commit"\n' \
           b'[automation.b]\nmodel = "m"\nwatch = "hf://o/n@dev"\nmode = "commit"\n'
    parsed = parse_automation(text)
    assert [str(error) for error in parsed.errors] == [
        "automation.toml:6:1: automation.b.model: model 'm' is moved by automation.a already (one automation per model)"
    ]
    assert [str(error) for error in unknown_models(text, parsed.automations, ["n"])] == [
        "automation.toml:2:9: automation.a.model: no [models.m] in the spec files"
    ]
    assert unknown_models(text, parsed.automations, ["m"]) == []


def row(commit: str, result: Outcome) -> HistoryEntry:
    return HistoryEntry(commit, "main", 0.0, "s", 0.0, 0.0, result)


def test_aborted_rollouts_and_failed_applies_quarantine_their_digest() -> None:
    rows = [
        row("c1", Outcome.APPLIED),
        row("c2", Outcome.APPLIED), row("c2", Outcome.ABORTED),  # its canary failed
        row("c3", Outcome.FAILED), row("c3", Outcome.APPLIED),  # a retry applied it: not judged bad
        row("c4", Outcome.FAILED),
    ]
    failed = failed_commits(rows)
    assert [(f.commit, f.why) for f in failed] == [
        ("c2", "its rollout aborted (a failed canary check)"), ("c4", "its apply failed"),
    ]
    digests = {"c2": "d2", "c4": None}
    assert quarantined(failed, digests.get) == {"d2": "its rollout aborted (a failed canary check) at commit c2"}
    assert quarantined([FailedCommit("c2", "x"), FailedCommit("c5", "y")], {"c2": "d", "c5": "d"}.get) == {
        "d": "x at commit c2"
    }


def test_the_commit_message_names_both_digests_and_where_they_came_from() -> None:
    automation = Automation("sentiment", "sentiment", "s3://models/sentiment/", pick="newest")
    old, new = Pin("s3://models/sentiment/v3/", "a" * 64), Pin("s3://models/sentiment/v4/", "b" * 64)
    message = commit_message(automation, old, new)
    assert message.splitlines()[0] == f"automation sentiment: sentiment sha256 {'a' * 12} -> {'b' * 12}"
    assert "newest under s3://models/sentiment/" in message
    assert f"sha256: {'a' * 64} -> {'b' * 64}" in message
    assert "source: s3://models/sentiment/v3/ -> s3://models/sentiment/v4/" in message


def test_an_oci_pin_says_the_tag_that_named_it_and_both_manifest_digests() -> None:
    automation = Automation("tiny", "tiny", "oci://registry.example.com/acme/tiny", pick="semver")
    old = Pin(f"oci://registry.example.com/acme/tiny@sha256:{'1' * 64}", "a" * 64)
    new = Pin(f"oci://registry.example.com/acme/tiny@sha256:{'2' * 64}", "b" * 64,
              named_by="oci://registry.example.com/acme/tiny:v1.4.0")
    assert new == Pin(new.source, new.sha256)  # the tag says where it came from; the pin is the digests
    message = commit_message(automation, old, new)
    assert "moves to what the highest semver tag of oci://registry.example.com/acme/tiny names now." in message
    assert f"source: {old.source} -> {new.source}" in message
    assert "named by: oci://registry.example.com/acme/tiny:v1.4.0" in message
    body = request_body(automation, old, new, "deployments/tiny.toml")
    assert "| named by | | `oci://registry.example.com/acme/tiny:v1.4.0` |" in body
    assert f"`{old.source}`" in body and f"`{new.source}`" in body
