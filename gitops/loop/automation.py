"""Artifact automation at run time: look at each moving reference, and propose the new pin.

`AutomationRunner.run(automation)` is one look (docs/guides/automation.md):

1. the branch the pin goes to (`branch`, else the agent's) is read at its
   head, and the spec file declaring `[models.MODEL]` is found under the
   spec path;
2. the reference is resolved (`resolve`, given by the command: an S3 prefix
   by its rule, an hf:// branch, an OCI tag, an OCI repository's tags by
   their rule — the same code as `gitops models resolve`);
3. the same pin: nothing to do. A digest the agent's history judged bad (a
   commit pinning it whose rollout aborted, or whose apply failed and never
   applied later: `gitops.delivery.automation.quarantined`) is not proposed
   again, and the result says why;
4. else the file is edited in place (`gitops.specs.pins.pin_edits`: only the
   value literals change), committed on the branch's head (or, for an open
   pull request, on its branch `gitops/automation-NAME`, so the push is a
   fast-forward) — signed, when the agent has a `--signing-key`, and a
   commit that cannot be signed is an error result with nothing pushed —
   and either pushed to the branch (`commit`) or pushed to
   `gitops/automation-NAME` with a pull request opened or updated through
   the promotion's own code (`gitops.delivery.promotion.PullRequestPromoter`).

`AutomationLoop` runs the runner inside `gitops run`, off the apply path: on
its own timer, each automation every `interval_s`, the blocking work in a
thread (reading git through its own `GitSource` twin). It reads
`automation.toml` at the watched branch's head when a look is due (every
30 s while it names none), runs the automations naming this agent's
environment, does not propose the pin it proposed last again (until the
branch has it), counts runs,
proposals and errors (`gitops.loop.metrics`), logs each outcome and keeps
the last one per automation for `/status`. Any error is one result (redacted,
`gitops.redaction`), never an exception out of the loop: an automation
cannot stop or delay an apply. `gitops automation run` calls the runner once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gitops.delivery.automation import (
    Automation,
    FailedCommit,
    Pin,
    automation_branch,
    commit_message,
    quarantined,
    request_body,
    request_title,
)
from gitops.delivery.gates import PromotionSettings
from gitops.delivery.promotion import PromotionRequest
from gitops.errors import GitopsError
from gitops.redaction import redact
from gitops.specs.pins.automation import AUTOMATION_PATH, parse_automation
from gitops.specs.environments import ENVIRONMENTS_PATH
from gitops.specs.pins.pin_edits import DeclaredModel, PinEditError, declared_model, edit_pin

__all__ = [
    "AutomationLoop",
    "AutomationMetrics",
    "AutomationRunner",
    "Repository",
    "Resolve",
    "RunResult",
    "automation_status",
]

_LOG = logging.getLogger("gitops.automation")
_IDLE_READ_S = 30.0  # with no automation (or an invalid file): how often automation.toml is read again

# What a reference resolves to now (the commands' S3 and Hub code); raises GitopsError.
Resolve = Callable[[Automation, DeclaredModel], Pin]
# Opens or updates the pull request of a request (`PullRequestPromoter.promote`); raises GitopsError.
OpenRequest = Callable[[PromotionRequest], str]


class Repository(Protocol):
    """The git side (`gitops.sources.repos.GitSource` through `gitops.commands.automation`)."""

    def branch_head(self, branch: str) -> str | None: ...
    def spec_files(self, commit: str, spec_path: str) -> dict[str, bytes]: ...
    def read(self, commit: str, path: str) -> bytes | None: ...
    def commit_file(self, parent: str, path: str, data: bytes, message: str) -> str: ...
    def push(self, commit: str, branch: str, provider: str | None = None) -> bool: ...
    def is_ancestor(self, older: str, newer: str) -> bool: ...


class AutomationMetrics(Protocol):
    def automation_run(self, automation: str, result: str) -> None: ...
    def automation_proposal(self, automation: str, mode: str) -> None: ...


@dataclass(frozen=True)
class RunResult:
    """One look at one automation: `result` is up_to_date, proposed, quarantined, dry_run or error."""

    automation: str
    result: str
    detail: str
    at: float = field(default_factory=time.time)
    old: Pin | None = None
    new: Pin | None = None
    diff: str = ""  # dry_run: the edit as a unified diff

    def to_json(self) -> dict[str, object]:
        return {
            "automation": self.automation, "result": self.result, "detail": self.detail, "at": self.at,
            "old_sha256": self.old.sha256 if self.old else None, "new_sha256": self.new.sha256 if self.new else None,
            "new_source": self.new.source if self.new else None,
        }


class AutomationRunner:
    def __init__(
        self,
        repository: Repository,
        resolve: Resolve,
        *,
        spec_path: str,
        default_branch: str,
        open_request: OpenRequest | None = None,  # None: no token, pull_request mode is an error
        failed_commits: Callable[[], Sequence[FailedCommit]] = lambda: (),
    ) -> None:
        self._repository = repository
        self._resolve = resolve
        self._spec_path = spec_path.strip("/")
        self._default_branch = default_branch
        self._open_request = open_request
        self._failed_commits = failed_commits
        self._digests: dict[tuple[str, str], str | None] = {}  # (commit, model) -> its sha256 there

    def run(self, automation: Automation, dry_run: bool = False) -> RunResult:
        """One look; never raises for what the store, the forge or git say (an error result)."""
        try:
            return self._run(automation, dry_run)
        except (GitopsError, PinEditError) as error:
            return RunResult(automation.name, "error", redact(str(error)))

    def _run(self, automation: Automation, dry_run: bool) -> RunResult:
        name = automation.name
        branch = automation.branch or self._default_branch
        head = self._repository.branch_head(branch)
        if head is None:
            return RunResult(name, "error", f"branch {branch} does not exist")
        declared = self._declared(head, automation.model)
        if declared is None:
            return RunResult(name, "error", f"no spec file under {self._spec_path or '.'} on {branch} declares "
                                            f"[models.{automation.model}] with a source and sha256")
        old = Pin(declared.source, declared.sha256)
        new = self._resolve(automation, declared)
        if new == old:
            return RunResult(name, "up_to_date", f"{automation.model} is at {new.sha256[:12]}", old=old, new=new)
        bad = quarantined(self._failed_commits(), lambda commit: self._digest_at(commit, automation.model))
        if new.sha256 in bad:
            return RunResult(name, "quarantined", f"sha256 {new.sha256[:12]} is not proposed again: "
                                                  f"{bad[new.sha256]}", old=old, new=new)
        text = self._repository.read(head, declared.path) or b""
        edited = edit_pin(text.decode("utf-8"), automation.model, {"sha256": new.sha256, "source": new.source})
        if dry_run:
            return RunResult(name, "dry_run", f"would move {automation.model} {old.sha256[:12]} -> {new.sha256[:12]} "
                                              f"({automation.mode} to {branch})", old=old, new=new,
                             diff=_diff(declared.path, text.decode("utf-8"), edited))
        message = commit_message(automation, old, new)
        if automation.mode == "commit":
            commit = self._repository.commit_file(head, declared.path, edited.encode(), message)
            self._repository.push(commit, branch, automation.provider)
            return RunResult(name, "proposed", f"pushed {commit[:7]} to {branch}: {automation.model} "
                                               f"{old.sha256[:12]} -> {new.sha256[:12]}", old=old, new=new)
        return self._request(automation, branch, head, declared, old, new, message)

    def _request(
        self, automation: Automation, branch: str, head: str, declared: DeclaredModel, old: Pin, new: Pin, message: str
    ) -> RunResult:
        name = automation.name
        if self._open_request is None:
            return RunResult(name, "error", "pull_request mode needs a token (gitops run --automation-token-file)",
                             old=old, new=new)
        source = automation_branch(automation)
        parent = head
        proposed = self._repository.branch_head(source)
        if proposed is not None and not self._repository.is_ancestor(proposed, head):
            parent = proposed  # its request is still open: build on it, so the push is a fast-forward
        text = self._repository.read(parent, declared.path)
        if text is None:
            parent, text = head, self._repository.read(head, declared.path) or b""
        edited = edit_pin(text.decode("utf-8"), automation.model, {"sha256": new.sha256, "source": new.source})
        commit = parent if edited == text.decode("utf-8") and parent != head else self._repository.commit_file(
            parent, declared.path, edited.encode(), message)
        settings = PromotionSettings(
            source=automation.environment or "automation", to=branch, branch=branch, soak_s=0.0, mode="pull_request",
            provider=automation.provider, repository=automation.repository, api_url=automation.api_url,
        )
        where = self._open_request(PromotionRequest(
            commit=commit, summary=message.splitlines()[0], settings=settings,
            title=request_title(automation, new), body=request_body(automation, old, new, declared.path),
            head=source, settings_file=f"{AUTOMATION_PATH} [automation.{name}]",
        ))
        return RunResult(name, "proposed", f"{where} ({source} at {commit[:7]}): {automation.model} "
                                           f"{old.sha256[:12]} -> {new.sha256[:12]}", old=old, new=new)

    def _declared(self, commit: str, model: str) -> DeclaredModel | None:
        for path, data in sorted(self._repository.spec_files(commit, self._spec_path).items()):
            try:
                found = declared_model(path, data.decode("utf-8"), model)
            except UnicodeDecodeError:
                continue
            if found is not None:
                return found
        return None

    def _digest_at(self, commit: str, model: str) -> str | None:
        key = (commit, model)
        if key not in self._digests:
            try:
                found = self._declared(commit, model)
            except GitopsError:
                found = None
            self._digests[key] = found.sha256 if found is not None else None
        return self._digests[key]


def is_spec_file(path: str) -> bool:
    """A `.toml` the spec loader reads: not an environment file nor `automation.toml`."""
    return path.endswith(".toml") and not path.startswith(f"{ENVIRONMENTS_PATH}/") and path != AUTOMATION_PATH


def _diff(path: str, before: str, after: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"))


def automation_status(results: dict[str, RunResult], errors: Sequence[str]) -> dict[str, object]:
    return {"errors": list(errors), "automations": [results[name].to_json() for name in sorted(results)]}


class AutomationLoop:
    """The runner on its own timer inside the agent; `status()` is the last look of each automation."""

    def __init__(
        self,
        runner: AutomationRunner,
        repository: Repository,
        *,
        branch: str,  # where automation.toml is read: the branch the agent watches
        environment: str | None,
        metrics: AutomationMetrics,
        tick_s: float = 1.0,
        log: logging.Logger = _LOG,
    ) -> None:
        self._runner = runner
        self._repository = repository
        self._branch = branch
        self._environment = environment
        self._metrics = metrics
        self._tick_s = tick_s
        self._log = log
        self._results: dict[str, RunResult] = {}
        self._errors: list[str] = []  # automation.toml's own errors, as last read
        self._due: dict[str, float] = {}  # name -> monotonic time of its next look
        self._proposed: dict[str, Pin] = {}  # name -> the pin last proposed (not proposed again)
        self._next_read = 0.0  # monotonic time automation.toml is read again

    def status(self) -> dict[str, object]:
        return automation_status(self._results, self._errors)

    async def run(self) -> None:
        """Look at each due automation until cancelled."""
        while True:
            try:
                await self.once()
            except Exception as error:  # noqa: BLE001 — automation must never end the agent
                self._log.error("automation: %s", redact(f"{type(error).__name__}: {error}"))
            await asyncio.sleep(self._tick_s)

    async def once(self, now: Callable[[], float] = time.monotonic) -> None:
        """Look at the automations that are due. The file is read (the branch fetched) only
        when one may be: at the soonest look, or every `_IDLE_READ_S` when none is set."""
        if now() < self._next_read:
            return
        automations = await asyncio.to_thread(self._automations)
        for automation in automations:
            if self._due.get(automation.name, 0.0) > now():
                continue
            self._due[automation.name] = now() + automation.interval_s
            try:
                result = await asyncio.to_thread(self._look, automation)
            except Exception as error:  # noqa: BLE001 — a bug or an odd answer is this automation's error, no more
                result = RunResult(automation.name, "error", redact(f"{type(error).__name__}: {error}"))
            self._record(automation, result)
        names = {automation.name for automation in automations}
        for gone in set(self._results) - names:
            del self._results[gone]
        for gone in set(self._due) - names:
            del self._due[gone]
        self._next_read = min(self._due.values(), default=now() + _IDLE_READ_S)

    def _look(self, automation: Automation) -> RunResult:
        before = self._proposed.get(automation.name)
        if before is not None:
            # Proposed already: only a newer pin is proposed again (the dry run says whether it is).
            look = self._runner.run(automation, dry_run=True)
            if look.result == "dry_run" and look.new == before:
                return RunResult(automation.name, "proposed_already",
                                 f"sha256 {before.sha256[:12]} is proposed already", old=look.old, new=look.new)
            if look.result != "dry_run":
                return look
        return self._runner.run(automation)

    def _automations(self) -> list[Automation]:
        head = self._repository.branch_head(self._branch)
        data = self._repository.read(head, AUTOMATION_PATH) if head is not None else None
        parsed = parse_automation(data)
        self._errors = [str(error) for error in parsed.errors]
        if parsed.errors:
            for error in parsed.errors:
                self._log.warning("automation: %s", error)
        return [automation for automation in parsed.automations if automation.environment == self._environment]

    def _record(self, automation: Automation, result: RunResult) -> None:
        self._results[automation.name] = result
        self._metrics.automation_run(automation.name, result.result)
        if result.result == "proposed":
            self._metrics.automation_proposal(automation.name, automation.mode)
            if result.new is not None:
                self._proposed[automation.name] = result.new
        elif result.result == "up_to_date":
            self._proposed.pop(automation.name, None)
        log = self._log.warning if result.result in ("error", "quarantined") else self._log.info
        log("automation %s: %s: %s", automation.name, result.result, redact(result.detail))

