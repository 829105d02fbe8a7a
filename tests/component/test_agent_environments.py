"""An environment's agent over an in-memory source and the fake controller:
a sync window holds a new commit, `--override-window` applies it and is
recorded; the served commit soaks, passes its gates and is promoted once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gitops.delivery.evidence import Counts
from gitops.delivery.promotion import PromotionError, PromotionRequest
from gitops.loop.agent import Agent, AgentSettings
from gitops.loop.environment_duties import EnvironmentDuties
from gitops.loop.history import History
from gitops.loop.metrics import AgentMetrics
from gitops.notifications.events import EventKind
from gitops.reconcile.outcomes import Outcome
from gitops.reconcile.planner import plan
from gitops.specs.loading import Loader
from gitops.status.rollup import SyncStatus
from gitops.testing import FakeController, MemorySource
from tests.support.agent_loop import APP, spec
from tests.support.notifiers import RecordingNotifier

ALWAYS_DENY = '[[sync_windows]]\nkind = "deny"\nschedule = "* * * * *"\nduration_s = 120\ntimezone = "Europe/Berlin"\n'
PROMOTION = (
    '[promotion]\nto = "prod"\nbranch = "env/prod"\nsoak_s = 60\n'
    'require = ["rollouts", "no_backend_errors", "shadow_agreement>=0.99"]\n'
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class RecordingPromoter:
    def __init__(self) -> None:
        self.requests: list[PromotionRequest] = []
        self.refuse = False

    def promote(self, request: PromotionRequest) -> str:
        if self.refuse:
            raise PromotionError("env/prod has commits that it does not (not a fast-forward)")
        self.requests.append(request)
        return f"pushed {request.commit[:7]} to env/prod"


@pytest.fixture
def source(tmp_path: Path) -> MemorySource:
    source = MemorySource(tmp_path / "exports", branch="env/staging")
    source.write("deployments/__init__.py", "")
    source.write("deployments/apps/__init__.py", "")
    source.write("deployments/apps/echo.py", APP)
    source.write("deployments/echo.toml", spec({"v1": 1.0}))
    source.write("environments/staging.toml", PROMOTION)
    source.commit("v1 only")
    return source


def make(
    source: MemorySource, tmp_path: Path, counts: list[Counts], notifier: RecordingNotifier | None = None
) -> tuple[Agent, EnvironmentDuties, RecordingPromoter, Clock]:
    clock, promoter = Clock(), RecordingPromoter()

    async def counters() -> Counts | None:
        return counts[0]

    duties = EnvironmentDuties(
        "staging", "env/staging", promoter=promoter, counters=counters,
        plan_markdown=lambda commit, settings: "### ray-gitops plan (`prod`)\n", clock=clock,
    )
    agent = Agent(
        source, FakeController(), History(tmp_path / "history.db"),
        load=Loader(environment="staging").load_tree, plan=plan, metrics=AgentMetrics(),
        settings=AgentSettings(), duties=duties, notifier=notifier,  # type: ignore[arg-type]
    )
    return agent, duties, promoter, clock


def test_a_deny_window_holds_a_new_commit_and_an_override_applies_it_on_record(source: MemorySource, tmp_path: Path) -> None:
    agent, duties, _, _ = make(source, tmp_path, [Counts()])
    first = asyncio.run(agent.tick())
    assert first is not None and first.result is Outcome.APPLIED
    source.write("environments/staging.toml", ALWAYS_DENY)
    held = source.commit("frozen: changes nothing that serves")
    assert asyncio.run(agent.tick()) is None  # nothing attempted, nothing recorded
    status = agent.status()
    assert (status.status, status.conditions[0].reason) == (SyncStatus.HELD, "SyncWindow")
    assert status.environment is not None and status.environment.held is not None
    assert status.environment.held.commit == held
    assert "deny window deny '* * * * *' for 120s (Europe/Berlin) is open until" in status.conditions[0].message
    assert agent.history(1)[0].commit != held
    agent.sync(override_window_by="admin token sha256:0123456789ab")
    applied = asyncio.run(agent.tick())
    assert applied is not None and (applied.commit, applied.result) == (held, Outcome.NOOP)
    rows = agent.history(2)
    assert (rows[1].commit, rows[1].result) == (held, Outcome.WINDOW_OVERRIDE)
    assert rows[1].plan_summary.startswith("sync window overridden by admin token sha256:0123456789ab: deny window")
    assert agent.status().status is SyncStatus.SYNCED and agent.status().last_applied_revision == held


def test_a_held_commit_is_planned_against_what_runs_for_the_status_page(source: MemorySource, tmp_path: Path) -> None:
    agent, _, _, _ = make(source, tmp_path, [Counts()])
    asyncio.run(agent.tick())
    assert agent.pending_plan() is None
    source.write("environments/staging.toml", ALWAYS_DENY)
    source.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    held = source.commit("v2 takes half, during a freeze")
    assert asyncio.run(agent.tick()) is None
    pending = agent.pending_plan()
    assert pending is not None and pending.commit == held and pending.why.startswith("held: deny window")
    assert "~ endpoint echo" in pending.text and '"v2": 0.5' in pending.text
    assert pending.text.rstrip().endswith("Plan: 0 to create, 1 to update, 0 to delete.")
    agent.sync(override_window_by="otto")
    asyncio.run(agent.tick())
    assert agent.pending_plan() is None  # applied: nothing waits


def test_a_held_commit_says_suspended_while_the_agent_is_and_held_again_once_resumed(
    source: MemorySource, tmp_path: Path
) -> None:
    agent, _, _, _ = make(source, tmp_path, [Counts()])
    asyncio.run(agent.tick())
    source.write("environments/staging.toml", ALWAYS_DENY)
    source.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    held = source.commit("v2 takes half, during a freeze")
    asyncio.run(agent.tick())
    agent.suspend()
    asyncio.run(agent.watch_head())
    pending = agent.pending_plan()
    assert pending is not None and (pending.commit, pending.why) == (held, "suspended")
    assert "~ endpoint echo" in pending.text
    agent.resume()
    asyncio.run(agent.tick())
    pending = agent.pending_plan()
    assert pending is not None and pending.commit == held and pending.why.startswith("held: deny window")


def test_the_served_commit_is_promoted_once_after_its_soak(source: MemorySource, tmp_path: Path) -> None:
    counts = [Counts(requests=100, compared=100)]
    notifier = RecordingNotifier()
    agent, duties, promoter, clock = make(source, tmp_path, counts, notifier)
    asyncio.run(agent.tick())
    counts[0] = Counts(requests=400, compared=300, mismatched=1)
    clock.now += 59
    asyncio.run(agent.tick())
    assert promoter.requests == [] and duties.promotion.phase.value == "Soaking"
    clock.now += 1
    asyncio.run(agent.tick())
    (request,) = promoter.requests
    assert request.commit == source.head() and request.settings.branch == "env/prod"
    assert "| `no_backend_errors` | passed | 0 of 300 answers were 5xx |" in request.body
    assert "| `shadow_agreement>=0.99` | passed | 0.9950 agreement over 200 compared replies |" in request.body
    assert request.body.endswith("### ray-gitops plan (`prod`)\n")
    row = agent.history(1)[0]
    assert (row.result, row.commit) == (Outcome.PROMOTED, source.head())
    assert row.plan_summary.startswith("promoted to prod (env/prod): pushed")
    (announced,) = [event for event in notifier.events if event.kind is EventKind.PROMOTED]
    assert (announced.commit, announced.branch, announced.errors) == (source.head(), "env/staging", (row.plan_summary,))
    clock.now += 600
    asyncio.run(agent.tick())
    assert len(promoter.requests) == 1  # once
    environment = agent.status().environment
    assert environment is not None and environment.promotion is not None and environment.promotion.phase == "Promoted"


def test_backend_errors_fail_the_commit_for_good(source: MemorySource, tmp_path: Path) -> None:
    counts = [Counts(requests=10)]
    agent, duties, promoter, clock = make(source, tmp_path, counts)
    asyncio.run(agent.tick())
    counts[0] = Counts(requests=50, errors=2, compared=10)
    clock.now += 120
    asyncio.run(agent.tick())
    assert promoter.requests == [] and duties.promotion.phase.value == "Failed"
    assert "no_backend_errors: 2 of 40 answers were 5xx" in duties.promotion.message


def test_a_newer_commit_restarts_the_soak(source: MemorySource, tmp_path: Path) -> None:
    counts = [Counts(compared=10)]
    agent, duties, promoter, clock = make(source, tmp_path, counts)
    asyncio.run(agent.tick())
    clock.now += 50
    source.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    newer = source.commit("newer")
    asyncio.run(agent.tick())
    clock.now += 30
    asyncio.run(agent.tick())
    assert promoter.requests == [] and duties.promotion.commit == newer
    counts[0] = Counts(compared=20)
    clock.now += 30
    asyncio.run(agent.tick())
    assert [request.commit for request in promoter.requests] == [newer]


def test_a_refused_promotion_is_tried_again_and_not_recorded(source: MemorySource, tmp_path: Path) -> None:
    counts = [Counts(compared=10)]
    agent, duties, promoter, clock = make(source, tmp_path, counts)
    promoter.refuse = True
    asyncio.run(agent.tick())
    counts[0] = Counts(compared=20)
    clock.now += 61
    asyncio.run(agent.tick())
    assert agent.history(1)[0].result is Outcome.APPLIED
    environment = agent.status().environment
    assert environment is not None and environment.promotion is not None
    assert "not a fast-forward" in str(environment.promotion.error)
    promoter.refuse = False
    clock.now += 31
    asyncio.run(agent.tick())
    assert agent.history(1)[0].result is Outcome.PROMOTED


def test_a_restarted_agent_does_not_promote_a_commit_again(source: MemorySource, tmp_path: Path) -> None:
    counts = [Counts(compared=10)]
    agent, _, promoter, clock = make(source, tmp_path, counts)
    asyncio.run(agent.tick())
    counts[0] = Counts(compared=20)
    clock.now += 61
    asyncio.run(agent.tick())
    assert len(promoter.requests) == 1
    again, duties, promoter_after_restart, clock_after = make(source, tmp_path, [Counts(compared=30)])
    clock_after.now = clock.now + 600
    asyncio.run(again.tick())
    asyncio.run(again.tick())
    assert promoter_after_restart.requests == [] and duties.promotion.phase.value == "Promoted"


def test_row50_5_a_commit_deleting_the_deny_window_is_held_by_the_window_in_force(
    source: MemorySource, tmp_path: Path
) -> None:
    # Issue 50, row 5: the windows were read from the commit being judged, so deleting them escaped them.
    agent, _, _, _ = make(source, tmp_path, [Counts()])
    asyncio.run(agent.tick())
    source.write("environments/staging.toml", PROMOTION + ALWAYS_DENY)
    frozen = source.commit("freeze")
    assert asyncio.run(agent.tick()) is None  # its own window holds it
    agent.sync(override_window_by="admin token sha256:0123456789ab")
    asyncio.run(agent.tick())
    assert agent.status().last_applied_revision == frozen
    source.write("environments/staging.toml", PROMOTION)  # the window deleted ...
    source.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))  # ... and a backend changed with it
    escape = source.commit("unfreeze and ship")
    assert asyncio.run(agent.tick()) is None
    status = agent.status()
    assert (status.status, status.conditions[0].reason) == (SyncStatus.HELD, "SyncWindow")
    assert status.environment is not None and status.environment.held is not None
    assert status.environment.held.commit == escape
    assert agent.history(1)[0].commit == frozen and status.last_applied_revision == frozen
    # Only an override lets it through, and it is recorded.
    agent.sync(override_window_by="admin token sha256:0123456789ab")
    applied = asyncio.run(agent.tick())
    assert applied is not None and applied.commit == escape
    rows = agent.history(2)
    assert (rows[1].commit, rows[1].result) == (escape, Outcome.WINDOW_OVERRIDE)
    # Once applied, its own (no) windows are the ones in force.
    source.write("deployments/echo.toml", spec({"v1": 1.0}))
    after = source.commit("back to v1")
    applied = asyncio.run(agent.tick())
    assert applied is not None and applied.commit == after


def test_row50_5_a_restarted_agent_judges_by_the_applied_commits_windows(source: MemorySource, tmp_path: Path) -> None:
    agent, _, _, _ = make(source, tmp_path, [Counts()])
    source.write("environments/staging.toml", PROMOTION + ALWAYS_DENY)
    source.commit("freeze")
    asyncio.run(agent.tick())
    agent.sync(override_window_by="admin token sha256:0123456789ab")
    asyncio.run(agent.tick())
    source.write("environments/staging.toml", PROMOTION)
    escape = source.commit("unfreeze")
    again, _, _, _ = make(source, tmp_path, [Counts()])  # a new agent process: the applied commit is read back
    assert asyncio.run(again.tick()) is None
    held = again.status().environment
    assert held is not None and held.held is not None and held.held.commit == escape


def test_row50_5_a_commit_lowering_its_gates_is_judged_by_the_gates_before_it(source: MemorySource, tmp_path: Path) -> None:
    counts = [Counts(compared=10)]
    agent, duties, promoter, clock = make(source, tmp_path, counts)
    asyncio.run(agent.tick())
    source.write("environments/staging.toml", '[promotion]\nto = "prod"\nbranch = "env/prod"\nsoak_s = 0\n')
    source.write("deployments/echo.toml", spec({"v1": 0.5, "v2": 0.5}))
    lax = source.commit("no soak, no gates")
    asyncio.run(agent.tick())
    clock.now += 5
    asyncio.run(agent.tick())
    assert promoter.requests == [] and duties.promotion.commit == lax
    assert duties.promotion.phase.value == "Soaking"
    environment = agent.status().environment
    assert environment is not None and environment.promotion is not None and environment.promotion.soak_s == 60
    counts[0] = Counts(requests=10, compared=20)
    clock.now += 60
    asyncio.run(agent.tick())
    (request,) = promoter.requests
    assert request.commit == lax and request.settings.soak_s == 60
    assert [gate.name for gate in duties.promotion.gates if gate.name != "soak"] == [
        "rollouts", "no_backend_errors", "shadow_agreement>=0.99",
    ]
