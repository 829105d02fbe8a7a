"""The soak's pure core (bench/soak_plan.py): its schedule, which failures are explained,
the memory slopes and the verdict."""

from __future__ import annotations

from bench.soak_plan import (
    MIN_SLOPE_SPAN_S,
    SLOPE_BOUND_MB_PER_H,
    WARMUP_S,
    Failure,
    FaultKind,
    Injected,
    Planned,
    Sample,
    Slope,
    Soak,
    Traffic,
    explain,
    render,
    schedule,
    slope,
    verdict,
)


def test_a_schedule_is_the_same_for_a_seed_and_spaces_faults_20_to_60_s() -> None:
    kinds = list(FaultKind)
    plan = schedule(7, 1200, kinds)
    assert plan == schedule(7, 1200, kinds)
    assert plan != schedule(8, 1200, kinds)
    gaps = [b.at - a.at for a, b in zip(plan, plan[1:])]
    assert all(19.9 <= gap <= 60.1 for gap in gaps), gaps
    assert plan[0].at == 15.0 and plan[-1].at < 1200


def test_a_long_schedule_deals_every_kind_before_repeating_one() -> None:
    kinds = list(FaultKind)
    plan = schedule(3, 3600, kinds)
    first_round = [p.kind for p in plan[: len(kinds)]]
    assert sorted(first_round, key=kinds.index) == kinds


def test_only_held_faults_are_held_10_to_30_s() -> None:
    for planned in schedule(5, 3600, list(FaultKind)):
        held = planned.kind in (FaultKind.REPLICA_STOP, FaultKind.GIT_REFUSE, FaultKind.GIT_STALL,
                                FaultKind.GIT_GARBAGE, FaultKind.STATE_DIR_FULL)
        assert (10 <= planned.hold_s <= 30) if held else planned.hold_s == 0


def _fault(kind: FaultKind, at: float, released: float | None = None, recovered: float | None = None) -> Injected:
    released = at if released is None else released
    return Injected(Planned(at, kind), at, released, released + 3 if recovered is None else recovered)


def test_a_request_in_flight_on_a_killed_replica_is_explained_and_one_sent_after_is_not() -> None:
    kill = _fault(FaultKind.REPLICA_KILL, 100)
    in_flight = Failure(Traffic.STREAM, 99.8, 100.1, "cut")
    later = Failure(Traffic.PLAIN, 100.5, 100.6, "status 503")
    assert explain(in_flight, [kill]) == (kill, "in flight on the killed process")
    assert explain(later, [kill]) is None


def test_only_the_handle_calls_just_after_a_replica_kill_may_fail_as_the_relays_502() -> None:
    kill = _fault(FaultKind.REPLICA_KILL, 100)
    assert explain(Failure(Traffic.HANDLE, 100.3, 100.4, "status 502"), [kill]) is not None
    assert explain(Failure(Traffic.HANDLE, 105, 105.1, "status 502"), [kill]) is None
    assert explain(Failure(Traffic.PLAIN, 100.3, 100.4, "status 502"), [kill]) is None


def test_after_a_proxy_worker_kill_refused_reset_and_503_are_explained_until_recovery() -> None:
    kill = _fault(FaultKind.PROXY_WORKER_KILL, 100, recovered=104)
    for kind in ("refused", "reset", "status 503"):
        assert explain(Failure(Traffic.PLAIN, 101, 101.1, kind), [kill]) is not None
    assert explain(Failure(Traffic.PLAIN, 101, 101.1, "status 500"), [kill]) is None
    assert explain(Failure(Traffic.PLAIN, 110, 110.1, "refused"), [kill]) is None


def test_a_stopped_replica_explains_504s_and_cut_streams_but_not_500s() -> None:
    stop = _fault(FaultKind.REPLICA_STOP, 100, released=120)
    assert explain(Failure(Traffic.PLAIN, 101, 106, "status 504"), [stop]) is not None
    assert explain(Failure(Traffic.WEBSOCKET, 118, 125, "cut"), [stop]) is not None
    assert explain(Failure(Traffic.PLAIN, 101, 101.1, "status 500"), [stop]) is None
    assert explain(Failure(Traffic.PLAIN, 140, 145, "status 504"), [stop]) is None


def test_a_handle_call_held_by_a_replaced_stopped_replica_is_explained_only_as_the_relays_502() -> None:
    stop = _fault(FaultKind.REPLICA_STOP, 100, released=120)
    assert explain(Failure(Traffic.HANDLE, 107, 110, "status 502"), [stop]) is not None
    assert explain(Failure(Traffic.PLAIN, 107, 110, "status 502"), [stop]) is None
    assert explain(Failure(Traffic.HANDLE, 107, 110, "status 502"), [_fault(FaultKind.AGENT_KILL, 100)]) is None


def test_faults_with_no_documented_failure_explain_nothing() -> None:
    faults = [_fault(kind, 100) for kind in (FaultKind.CONTROLLER_KILL, FaultKind.AGENT_KILL, FaultKind.GIT_STALL,
                                            FaultKind.BAD_COMMIT, FaultKind.ROLLING_UPDATE, FaultKind.GCS_RESTART)]
    assert explain(Failure(Traffic.PLAIN, 99.9, 100.1, "reset"), faults) is None


def _series(pid: int, start: float, mb0: float, per_h: float, n: int = 30, role: str = "agent") -> list[Sample]:
    return [Sample(role, pid, start + 10 * i, 1000.0, mb0 + per_h * (10 * i) / 3600) for i in range(n)]


def test_the_slope_is_pooled_over_restarted_processes_and_skips_their_warm_up() -> None:
    # Two lives of a process, each growing 36 MB/h, the second starting lower: no shrinking.
    samples = _series(1, 0, 200, 36) + _series(2, 400, 150, 36)
    # A warm-up jump early in each life does not count.
    samples += [Sample("agent", 1, -60, 1000.0, 50), Sample("agent", 2, 340, 1000.0, 40)]
    got = slope(samples)
    assert got.mb_per_h is not None and abs(got.mb_per_h - 36) < 0.5
    assert got.processes == 2


def test_a_slope_is_judged_only_on_a_long_enough_run() -> None:
    short = slope(_series(1, 0, 100, 500, n=20))
    assert not short.judged and not short.too_steep
    long = slope(_series(1, 0, 100, 500, n=int((WARMUP_S + MIN_SLOPE_SPAN_S) / 10) + 2))
    assert long.judged and long.too_steep
    flat = slope(_series(1, 0, 100, 0, n=int((WARMUP_S + MIN_SLOPE_SPAN_S) / 10) + 2))
    assert flat.judged and not flat.too_steep


def test_the_judged_slope_is_of_anonymous_memory_and_pss_is_shown_beside_it() -> None:
    # PSS climbing 300 MB/h (shared pages paged in, sharers gone) while the anonymous memory stays flat: no leak.
    n = int((WARMUP_S + MIN_SLOPE_SPAN_S) / 10) + 2
    samples = [Sample("controller", 1, 10 * i, 60 + 300 * (10 * i) / 3600, 40.0) for i in range(n)]
    anonymous, pss = slope(samples), slope(samples, of_pss=True)
    assert anonymous.judged and anonymous.mb_per_h == 0 and not anonymous.too_steep
    assert pss.mb_per_h is not None and abs(pss.mb_per_h - 300) < 0.5 and pss.too_steep
    assert anonymous.last_mb == 40.0 and pss.last_mb > 60


def _soak(failures: list[Failure], **changes: object) -> Soak:
    fields: dict[str, object] = dict(
        seed=1, minutes=2, requests={"plain": 100}, faults=[_fault(FaultKind.REPLICA_KILL, 10)],
        failures=failures, slopes={"agent": Slope(1.0, 60, 1, 200)}, leaked_actors=[], serves_head=True,
        head_note="head abc", pss_slopes={"agent": Slope(50.0, 60, 1, 300)},
    )
    fields.update(changes)
    return Soak(**fields)  # type: ignore[arg-type]


def test_the_verdict_fails_on_what_is_unexplained_leaked_steep_or_off_head() -> None:
    explained = Failure(Traffic.PLAIN, 9.9, 10.2, "reset")
    assert verdict(_soak([explained])) == []
    assert verdict(_soak([Failure(Traffic.PLAIN, 30, 30.1, "status 500")])) == ["1 unexplained failed requests"]
    assert verdict(_soak([], leaked_actors=["1 replica actor(s)"]))
    assert verdict(_soak([], serves_head=False))
    steep = Slope(SLOPE_BOUND_MB_PER_H + 1, MIN_SLOPE_SPAN_S, 1, 200)
    assert verdict(_soak([], slopes={"agent": steep}))
    never = Injected(Planned(10, FaultKind.CONTROLLER_KILL), 10, 10, None)
    assert verdict(_soak([], faults=[never]))


def test_the_document_shows_each_fault_its_failures_and_the_slopes() -> None:
    text = render(_soak([Failure(Traffic.STREAM, 9.9, 10.2, "cut"), Failure(Traffic.PLAIN, 30, 30.1, "status 500")]),
                  "make soak")
    assert "## Result: FAIL" in text
    assert "| 10 | kill -9 a replica | — | 3.00 | 2 | stream cut 1 | 1 |" in text
    assert "30.0 s plain: status 500" in text
    assert "| agent | 1 | 300.0 | +50.0 | 200.0 | +1.0 | 1.0 (too short to judge) |" in text
