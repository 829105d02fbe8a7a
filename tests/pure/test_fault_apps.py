"""The bench's fault backend (`bench.fault_apps.Faulty`): one replica of a backend fails, the same requests each run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bench.fault_apps import FAULT_STATUS, Faulty
from ray_gitops.registry import install
from vocabulary.replicas.serving import HandleOutcome, ReplicaContext


class NoCalls:
    async def call(self, target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[HandleOutcome, Any]:
        raise AssertionError("the fault backend calls nothing")

    def commit_of(self, backend: str) -> str | None:
        return None


def started(replica_id: str, *args: Any) -> Faulty:
    install(ReplicaContext("faulty", replica_id, "v1", None), NoCalls())
    return Faulty(*args)


def statuses(replica: Faulty, n: int) -> list[int]:
    async def answers() -> list[int]:
        return [getattr(await replica(None), "status_code", 200) for _ in range(n)]
    return asyncio.run(answers())


def test_only_the_replica_that_claims_the_fault_fails_and_its_share_is_near_the_fraction(tmp_path: Path) -> None:
    claim = str(tmp_path / "claim")
    first, second = started("r-1", "5xx", 0.5, claim), started("r-2", "5xx", 0.5, claim)
    assert (tmp_path / "claim").read_text() == "r-1"
    codes = statuses(first, 1000)
    assert set(codes) == {200, FAULT_STATUS} and 450 <= codes.count(FAULT_STATUS) <= 550
    assert set(statuses(second, 200)) == {200}, "the others, and a replacement, are healthy"
    assert statuses(started("r-3", "5xx", 0.5, str(tmp_path / "again")), 1000) == codes, "the same draws each run"


def test_ok_fails_nothing_and_a_wrong_mode_or_fraction_is_refused(tmp_path: Path) -> None:
    assert set(statuses(started("r-1", "ok", 1.0), 50)) == {200}
    with pytest.raises(ValueError, match="mode must be one of ok, 5xx, stall"):
        started("r-1", "teapot")
    with pytest.raises(ValueError, match="fraction must be between 0 and 1"):
        started("r-1", "5xx", 1.5)


def test_a_stalling_replica_never_answers_the_requests_it_fails() -> None:
    replica = started("r-1", "stall", 1.0)

    async def one() -> None:
        await asyncio.wait_for(replica(None), 0.2)
    with pytest.raises(TimeoutError):
        asyncio.run(one())


def test_a_healthy_backend_turns_faulty_when_its_user_config_changes_in_place(tmp_path: Path) -> None:
    claim = str(tmp_path / "claim")
    first, second = started("r-1", "ok", 0.5, claim), started("r-2", "ok", 0.5, claim)
    assert set(statuses(first, 100)) == {200} and not (tmp_path / "claim").exists()
    for replica in (second, first):
        replica.reconfigure({"mode": "5xx", "fraction": 1.0, "claim": claim})
    assert set(statuses(second, 20)) == {FAULT_STATUS} and set(statuses(first, 20)) == {200}
    second.reconfigure({"mode": "ok"})
    assert set(statuses(second, 20)) == {200}
