"""Promotion gates: soak, rollouts, backend errors, shadow agreement; pure steps."""

from __future__ import annotations

import pytest

from gitops.delivery.gates import (
    Evidence,
    Phase,
    PromotionSettings,
    PromotionState,
    RequirementError,
    advance,
    parse_requirement,
)

SETTINGS = PromotionSettings(
    source="staging",
    to="prod",
    branch="env/prod",
    soak_s=60,
    require=tuple(parse_requirement(text) for text in ("rollouts", "no_backend_errors", "shadow_agreement>=0.99")),
)


def good(commit: str = "a" * 40, **changes: object) -> Evidence:
    values: dict[str, object] = dict(
        commit=commit, synced=True, backend_requests=500, shadow_compared=200, shadow_mismatched=1,
        rollouts_passed=("echo: 3 steps, 0.2% 5xx",),
    )
    values.update(changes)
    return Evidence(**values)  # type: ignore[arg-type]


def test_a_commit_is_ready_once_it_served_the_soak_with_every_gate_passing() -> None:
    state = advance(PromotionState(), SETTINGS, good(), now=1000)
    assert state.phase is Phase.SOAKING and "served 0s of 60s" in state.message
    state = advance(state, SETTINGS, good(), now=1059)
    assert state.phase is Phase.SOAKING
    state = advance(state, SETTINGS, good(), now=1060)
    assert state.phase is Phase.READY and state.ready_at == 1060
    assert [gate.name for gate in state.gates] == ["soak", "rollouts", "no_backend_errors", "shadow_agreement>=0.99"]
    assert "0.9950 agreement over 200" in state.gates[3].detail


def test_the_soak_counts_only_while_synced_without_a_break() -> None:
    state = advance(PromotionState(), SETTINGS, good(), now=0)
    state = advance(state, SETTINGS, good(synced=False), now=50)
    state = advance(state, SETTINGS, good(), now=70)
    state = advance(state, SETTINGS, good(), now=120)
    assert state.phase is Phase.SOAKING
    assert advance(state, SETTINGS, good(), now=130).phase is Phase.READY


def test_a_newer_commit_restarts_the_soak() -> None:
    state = advance(PromotionState(), SETTINGS, good("a" * 40), now=0)
    state = advance(state, SETTINGS, good("b" * 40), now=59)
    state = advance(state, SETTINGS, good("b" * 40), now=61)
    assert state.commit == "b" * 40 and state.phase is Phase.SOAKING
    assert advance(state, SETTINGS, good("b" * 40), now=119).phase is Phase.READY


@pytest.mark.parametrize(
    ("evidence", "why"),
    [
        (good(rollouts_stopped=("echo: aborted at step 1: error ratio 0.5 > 0.01",)), "rollouts: echo: aborted"),
        (good(backend_errors=3), "no_backend_errors: 3 of 500 answers were 5xx"),
        (good(shadow_mismatched=20), "shadow_agreement>=0.99: 0.9000 agreement"),
    ],
)
def test_a_commit_that_fails_a_gate_is_never_promoted(evidence: Evidence, why: str) -> None:
    state = advance(PromotionState(), SETTINGS, evidence, now=0)
    assert state.phase is Phase.FAILED and why in state.message
    # Failing is final for the commit, however long it serves afterwards and whatever the evidence says then.
    assert advance(state, SETTINGS, good(), now=10_000).phase is Phase.FAILED


def test_shadow_agreement_waits_for_compared_replies() -> None:
    state = advance(PromotionState(), SETTINGS, good(shadow_compared=0, shadow_mismatched=0), now=0)
    state = advance(state, SETTINGS, good(shadow_compared=0, shadow_mismatched=0), now=100)
    assert state.phase is Phase.SOAKING and "no shadow reply compared yet" in state.message


@pytest.mark.parametrize("text", ["fast", "shadow_agreement>=1.5", "shadow_agreement"])
def test_a_requirement_that_names_no_gate_is_refused(text: str) -> None:
    with pytest.raises(RequirementError):
        parse_requirement(text)
