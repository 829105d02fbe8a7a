"""The replicas proxies eject as outliers in the agent's history ledger (issue 46 item 2): each ejection
the controller's status shows is one row, written when the agent first reads it (between ticks too), not
again while it lasts; a replica ejected again is a new row; an agent restarted while an ejection runs
does not write it twice. Through the admin API, `/history` answers them, by kind `ejected`, and none
for an actor."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import httpx

from gitops.admin.auth.access import AccessPolicy
from gitops.admin.api import build_app
from gitops.admin.auth.tokens import parse_tokens
from gitops.testing import FakeController
from tests.support.agent_loop import make_agent, spec_repo, until  # noqa: F401 — spec_repo is a fixture
from vocabulary.control.status import ReplicaEjection


def ejected(count: int, back_in_s: float = 30.0) -> tuple[ReplicaEjection, ...]:
    return (ReplicaEjection(replica_id="v1-7", reason="5 consecutive errors", count=count, back_in_s=back_in_s),)


def observe(agent, seconds: float, until_true=None) -> None:
    async def scenario() -> None:
        runner = asyncio.ensure_future(agent.run())
        try:
            await until(lambda: agent.reconciled.is_set())
            if until_true is not None:
                await until(until_true)
            await asyncio.sleep(seconds)  # several more observations
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)

    asyncio.run(scenario())


def test_each_ejection_is_one_history_row_written_between_ticks(spec_repo, tmp_path: Path) -> None:
    controller = FakeController()
    agent = make_agent(spec_repo, tmp_path, controller, watch=False, observe_interval_s=0.05)
    controller.ejections = {"v1": ejected(1)}
    observe(agent, 0.3, lambda: bool(agent.ejections()))
    [row] = agent.ejections()
    assert (row.backend, row.replica_id, row.count, row.reason) == ("v1", "v1-7", 1, "5 consecutive errors")
    assert row.describe() == "replica v1-7 of backend v1 ejected: 5 consecutive errors, out for 30 s"
    commits = [entry.commit for entry in agent.history()]

    controller.ejections = {"v1": ejected(2, 60.0)}  # ejected again: its second ejection
    observe(agent, 0.3, lambda: len(agent.ejections()) == 2)
    assert [(row.count, round(row.back_in_s)) for row in agent.ejections()] == [(2, 60), (1, 30)]
    assert [entry.commit for entry in agent.history()] == commits  # the commits' rows are not touched


def test_an_agent_restarted_while_an_ejection_runs_does_not_write_it_again(spec_repo, tmp_path: Path) -> None:
    controller = FakeController()
    controller.ejections = {"v1": ejected(1)}
    first = make_agent(spec_repo, tmp_path, controller, watch=False, observe_interval_s=0.05)
    observe(first, 0.1, lambda: bool(first.ejections()))
    again = make_agent(spec_repo, tmp_path, controller, watch=False, observe_interval_s=0.05)  # the same ledger
    observe(again, 0.3)
    assert len(again.ejections()) == 1


def test_the_history_route_answers_the_ejections_by_kind_and_none_for_an_actor(spec_repo, tmp_path: Path) -> None:
    controller = FakeController()
    controller.ejections = {"v1": ejected(1)}
    agent = make_agent(spec_repo, tmp_path, controller, watch=False, observe_interval_s=0.05)
    observe(agent, 0.1, lambda: bool(agent.ejections()))
    table = parse_tokens(f"vera viewer {hashlib.sha256(b'tok-v').hexdigest()}", "tokens")
    app = build_app(agent, sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    policy=AccessPolicy.build(None, "127.0.0.1", tokens=lambda: table), audit=agent,
                    ejections=agent.ejections)

    def history(query: str) -> dict:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5555))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                return await client.get("/history" + query, headers={"Authorization": "Bearer tok-v"})

        response = asyncio.run(go())
        assert response.status_code == 200, response.text
        return response.json()

    every = history("")
    assert [(e["backend"], e["replica_id"], e["count"]) for e in every["ejections"]] == [("v1", "v1-7", 1)]
    assert every["entries"]  # beside the commits' rows
    only = history("?kind=ejected")
    assert only["entries"] == [] and only["actions"] == [] and len(only["ejections"]) == 1
    assert history("?kind=applied")["ejections"] == []
    assert history("?actor=vera")["ejections"] == []
