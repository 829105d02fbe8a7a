"""Artifact automation's vocabulary: what an `[automation.X]` table says, and the pure decisions.

An automation (`automation.toml` at the repository root, parsed by
`gitops.specs.pins.automation`; docs/guides/automation.md) watches a moving
reference — an S3 prefix and the rule that picks one model under it
(`vocabulary.replicas.s3_picks`), an hf:// branch, an OCI tag, or an OCI
repository's tags and the rule that picks one (`vocabulary.replicas.oci_tags`)
— every `interval_s`,
and when what it resolves to differs from the pin of `[models.MODEL]` in
git, writes the new pin and pushes a commit or opens (updates) a pull
request (`gitops.loop.automation` does the I/O).

Here, pure:

- `Automation`: one table's settings, as values.
- `Pin`: what a reference resolves to (source, sha256, and the tag that named
  it, for an OCI repository).
- `quarantined`: the digests a model must not be proposed at again — those
  of commits whose rollout the agent recorded as aborted (its canary
  failed and traffic went back) or whose apply failed and never applied
  later — each with why.
- `commit_message`, `request_title`, `request_body`: what the commit and the
  pull request say: the model, old and new digests and sources (for oci://,
  the manifest digests), and the reference, rule and tag they came from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gitops.reconcile.outcomes import HistoryEntry, Outcome

__all__ = [
    "MODES",
    "Automation",
    "FailedCommit",
    "Pin",
    "automation_branch",
    "failed_commits",
    "commit_message",
    "quarantined",
    "request_body",
    "request_title",
]

MODES = ("commit", "pull_request")


@dataclass(frozen=True)
class Automation:
    """One `[automation.NAME]` table."""

    name: str
    model: str  # the [models.MODEL] table it moves
    watch: str  # s3://BUCKET/PREFIX/, hf://ORG/NAME@BRANCH, oci://REGISTRY/REPO:TAG or oci://REGISTRY/REPO
    pick: str | None = None  # s3://: newest | highest-version; oci:// repository: semver | highest-version
    match: str | None = None  # s3://: a regex the entry's name must contain; oci://: the tag
    kind: str | None = None  # s3://: file | directory
    interval_s: float = 300.0
    mode: str = "pull_request"  # commit | pull_request
    branch: str | None = None  # where the pin goes (default: the branch the agent watches)
    provider: str | None = None  # github | gitlab (pull_request)
    repository: str | None = None
    api_url: str | None = None
    environment: str | None = None  # the agent that runs it: the one with this --environment (None: without)

    def rule(self) -> str:
        """How the reference is read, for people: `newest under s3://m/p/ matching 'x'`, `hf://o/n@main`,
        `the highest semver tag of oci://r/p matching 'x'`, `the highest-version tag of oci://r/p`."""
        if self.pick is None:
            return self.watch
        if self.watch.startswith("oci://"):
            said = f"the {'highest semver' if self.pick == 'semver' else self.pick} tag of {self.watch}"
            return said + (f" matching '{self.match}'" if self.match else "")
        said = f"{self.pick} under {self.watch}"
        if self.match:
            said += f" matching '{self.match}'"
        if self.kind:
            said += f" ({self.kind}s)"
        return said


@dataclass(frozen=True)
class Pin:
    """What a reference resolves to now."""

    source: str
    sha256: str
    # The moving reference that named it, when the rule chose among several (an OCI
    # repository's tag: oci://r/p:v1.4.0); said in the commit, not part of the pin.
    named_by: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class FailedCommit:
    """A commit the agent's history records as not judged good: its rollout aborted, or its apply failed."""

    commit: str
    why: str  # e.g. "rollout aborted"


def automation_branch(automation: Automation) -> str:
    """The branch a pull request of this automation comes from: one per automation, so one open request."""
    return f"gitops/automation-{automation.name}"


def failed_commits(entries: Iterable[HistoryEntry]) -> list[FailedCommit]:
    """The commits of the history (any order) whose rollout aborted, or whose apply failed and never applied."""
    rows = list(entries)
    good = {row.commit for row in rows if row.result in (Outcome.APPLIED, Outcome.STEP, Outcome.NOOP)}
    found: dict[str, FailedCommit] = {}
    for row in rows:
        if row.result is Outcome.ABORTED:
            found[row.commit] = FailedCommit(row.commit, "its rollout aborted (a failed canary check)")
        elif row.result is Outcome.FAILED and row.commit not in good and row.commit not in found:
            found[row.commit] = FailedCommit(row.commit, "its apply failed")
    return list(found.values())


def quarantined(failed: Iterable[FailedCommit], digest_at: Callable[[str], str | None]) -> Mapping[str, str]:
    """Digest -> why it is not proposed again, from the failed commits and the model's digest at each."""
    found: dict[str, str] = {}
    for row in failed:
        digest = digest_at(row.commit)
        if digest is not None and digest not in found:
            found[digest] = f"{row.why} at commit {row.commit[:12]}"
    return found


def commit_message(automation: Automation, old: Pin, new: Pin) -> str:
    lines = [
        f"automation {automation.name}: {automation.model} sha256 {old.sha256[:12]} -> {new.sha256[:12]}",
        "",
        f"[models.{automation.model}] moves to what {automation.rule()} names now.",
        "",
        f"sha256: {old.sha256} -> {new.sha256}",
    ]
    if old.source != new.source:
        lines.append(f"source: {old.source} -> {new.source}")
    else:
        lines.append(f"source: {new.source}")
    if new.named_by:
        lines.append(f"named by: {new.named_by}")
    return "\n".join(lines) + "\n"


def request_title(automation: Automation, new: Pin) -> str:
    return f"automation {automation.name}: {automation.model} to sha256 {new.sha256[:12]}"


def request_body(automation: Automation, old: Pin, new: Pin, path: str) -> str:
    rows = [
        f"`[models.{automation.model}]` in `{path}` moves to what **{automation.rule()}** names now.",
        "",
        "| | before | after |",
        "| --- | --- | --- |",
        f"| sha256 | `{old.sha256}` | `{new.sha256}` |",
        f"| source | `{old.source}` | `{new.source}` |",
        *([f"| named by | | `{new.named_by}` |"] if new.named_by else []),
        "",
        "Merging it applies like any commit: the backends using this model roll with the canary and gates "
        "they declare. A digest whose rollout fails is not proposed again.",
        "",
        f"Opened by ray-gitops automation `{automation.name}`; a newer pin updates this request.",
    ]
    return "\n".join(rows) + "\n"
