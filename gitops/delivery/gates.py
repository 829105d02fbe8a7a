"""Promotion gates: when a commit served here may move to the next environment.

An environment's `[promotion]` table (`gitops.specs.environments`) names
the environment promoted to, its branch, the soak time and the gates
(`require`). `advance` is the whole decision, a pure step the agent calls
once per tick with the evidence it already has:

- the soak: the commit has been applied and Synced for `soak_s` seconds
  without a break; a newer commit restarts it;
- `rollouts`: no rollout of the commit was aborted or paused on a failed check;
- `no_backend_errors`: the backends answered no 5xx while the commit served;
- `shadow_agreement>=R`: of the shadow replies compared, at least R agreed.

A gate failed once fails the commit for good: it is never promoted. A
commit is promoted once. Pure: no clock, git or HTTP (`gitops.delivery.promotion`
carries a decision out).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, replace

__all__ = [
    "RequirementError",
    "RequirementKind",
    "Requirement",
    "parse_requirement",
    "PromotionSettings",
    "Evidence",
    "Gate",
    "Phase",
    "PromotionState",
    "advance",
    "promoted",
    "promotion_body",
]


class RequirementError(ValueError):
    """A `require` entry that names no gate."""


class RequirementKind(str, enum.Enum):
    ROLLOUTS = "rollouts"
    NO_BACKEND_ERRORS = "no_backend_errors"
    SHADOW_AGREEMENT = "shadow_agreement"


_AGREEMENT = re.compile(r"shadow_agreement\s*>=\s*([0-9]*\.?[0-9]+)")


@dataclass(frozen=True)
class Requirement:
    kind: RequirementKind
    threshold: float | None = None

    @staticmethod
    def parse(text: str) -> Requirement:
        return parse_requirement(text)

    def __str__(self) -> str:
        return self.kind.value if self.threshold is None else f"{self.kind.value}>={self.threshold:g}"


def parse_requirement(text: str) -> Requirement:
    stripped = text.strip()
    if stripped in (RequirementKind.ROLLOUTS.value, RequirementKind.NO_BACKEND_ERRORS.value):
        return Requirement(RequirementKind(stripped))
    found = _AGREEMENT.fullmatch(stripped)
    if found is not None:
        ratio = float(found.group(1))
        if not 0 <= ratio <= 1:
            raise RequirementError(f"'{text}': the agreement ratio must be between 0 and 1")
        return Requirement(RequirementKind.SHADOW_AGREEMENT, ratio)
    raise RequirementError(f"'{text}' is not a gate (rollouts, no_backend_errors, shadow_agreement>=RATIO)")


@dataclass(frozen=True)
class PromotionSettings:
    source: str  # the environment promoted from (this agent's)
    to: str
    branch: str
    soak_s: float
    require: tuple[Requirement, ...] = ()
    mode: str = "push"  # or "pull_request"
    provider: str | None = None  # github, gitlab
    repository: str | None = None
    api_url: str | None = None


@dataclass(frozen=True)
class Evidence:
    """What the agent knows about the commit it serves, at one moment."""

    commit: str
    synced: bool  # applied, and the cluster is Synced with it
    rollouts_stopped: tuple[str, ...] = ()  # "endpoint: why", for each aborted or paused rollout
    rollouts_passed: tuple[str, ...] = ()  # "endpoint: numbers", for each completed rollout
    backend_requests: int = 0  # answered since the commit was applied
    backend_errors: int = 0  # of which 5xx
    shadow_compared: int = 0
    shadow_mismatched: int = 0

    def agreement(self) -> float | None:
        if self.shadow_compared == 0:
            return None
        return 1 - self.shadow_mismatched / self.shadow_compared


class Phase(str, enum.Enum):
    SOAKING = "Soaking"  # waiting for the soak (or for the evidence)
    READY = "Ready"  # every gate passed: promote now
    PROMOTED = "Promoted"
    FAILED = "Failed"  # a gate failed: never promoted


@dataclass(frozen=True)
class Gate:
    name: str
    passed: bool | None  # None: not decided yet
    detail: str


@dataclass(frozen=True)
class PromotionState:
    """One commit's way through the gates."""

    commit: str | None = None
    synced_since: float | None = None  # when it became applied and Synced, without a break since
    phase: Phase = Phase.SOAKING
    gates: tuple[Gate, ...] = ()
    ready_at: float | None = None  # when every gate passed
    message: str = ""
    evidence: Evidence | None = field(default=None, compare=False)

    def soaked_s(self, now: float) -> float:
        return 0.0 if self.synced_since is None else max(0.0, now - self.synced_since)


def advance(state: PromotionState, settings: PromotionSettings, evidence: Evidence, now: float) -> PromotionState:
    """The next state of the commit served, given what is known at `now`."""
    if state.commit != evidence.commit:
        state = PromotionState(commit=evidence.commit)  # a newer commit restarts the soak
    if state.phase in (Phase.PROMOTED, Phase.FAILED, Phase.READY):
        return state
    since = (state.synced_since if state.synced_since is not None else now) if evidence.synced else None
    gates = _gates(settings, evidence, since, now)
    failed = [gate for gate in gates if gate.passed is False]
    if failed:
        message = "; ".join(f"{gate.name}: {gate.detail}" for gate in failed)
        return replace(state, synced_since=since, phase=Phase.FAILED, gates=gates, message=message, evidence=evidence)
    if all(gate.passed for gate in gates):
        return replace(
            state,
            synced_since=since,
            phase=Phase.READY,
            gates=gates,
            ready_at=now,
            message=f"every gate passed; promoting to {settings.to}",
            evidence=evidence,
        )
    waiting = "; ".join(f"{gate.name}: {gate.detail}" for gate in gates if gate.passed is None)
    return replace(state, synced_since=since, gates=gates, message=waiting, evidence=evidence)


def promoted(state: PromotionState, detail: str) -> PromotionState:
    return replace(state, phase=Phase.PROMOTED, message=detail)


def _gates(settings: PromotionSettings, evidence: Evidence, since: float | None, now: float) -> tuple[Gate, ...]:
    soaked = 0.0 if since is None else now - since
    if since is None:
        soak = Gate("soak", None, "not applied and Synced yet")
    elif soaked >= settings.soak_s:
        soak = Gate("soak", True, f"served {soaked:.0f}s of {settings.soak_s:g}s")
    else:
        soak = Gate("soak", None, f"served {soaked:.0f}s of {settings.soak_s:g}s")
    return (soak, *(_gate(requirement, evidence) for requirement in settings.require))


def _gate(requirement: Requirement, evidence: Evidence) -> Gate:
    name = str(requirement)
    if requirement.kind is RequirementKind.ROLLOUTS:
        if evidence.rollouts_stopped:
            return Gate(name, False, "; ".join(evidence.rollouts_stopped))
        return Gate(name, True, "; ".join(evidence.rollouts_passed) or "no rollout stopped")
    if requirement.kind is RequirementKind.NO_BACKEND_ERRORS:
        if evidence.backend_errors:
            return Gate(name, False, f"{evidence.backend_errors} of {evidence.backend_requests} answers were 5xx")
        return Gate(name, True, f"0 of {evidence.backend_requests} answers were 5xx")
    agreement = evidence.agreement()
    threshold = requirement.threshold or 0.0
    if agreement is None:
        return Gate(name, None, "no shadow reply compared yet")
    text = f"{agreement:.4f} agreement over {evidence.shadow_compared} compared replies"
    return Gate(name, agreement >= threshold, text)


def promotion_body(
    commit: str, summary: str, state: PromotionState, settings: PromotionSettings, plan_markdown: str, now: float
) -> str:
    """The pull request's body: what passed, with the numbers, then the target's plan."""
    lines = [
        f"Promotes `{commit[:12]}` ({_one_line(summary)}) from `{settings.source}` to `{settings.to}`, "
        f"after it passed every gate in `{settings.source}`.",
        "",
        "| gate | result | evidence |",
        "|---|---|---|",
    ]
    for gate in state.gates:
        result = "passed" if gate.passed else ("failed" if gate.passed is False else "pending")
        lines.append(f"| `{gate.name}` | {result} | {_one_line(gate.detail)} |")
    lines += ["", f"Soak: served {state.soaked_s(now):.0f}s applied and Synced (required {settings.soak_s:g}s).", ""]
    return "\n".join(lines) + "\n" + plan_markdown


def _one_line(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
