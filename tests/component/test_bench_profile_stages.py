"""bench.proxy_profile's attribution of sampled stacks to stages (pure; no Ray, no py-spy)."""

from __future__ import annotations

from bench.proxy_profile import EVENT_LOOP, NATIVE, _seconds, classify, crossed, table, tally

LOOP = "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982)"


def test_a_stack_belongs_to_its_innermost_recognised_frame() -> None:
    stack = f"{LOOP};ProxyApp.__call__ (proxy/app.py:190);Counter.inc (prometheus_client/metrics.py:300)"
    assert classify(stack) == "metrics"


def test_stdlib_frames_inside_a_stage_are_passed_over_towards_the_caller() -> None:
    stack = (f"{LOOP};RequestResponseCycle.send (uvicorn/protocols/http/httptools_impl.py:524);"
             "write (asyncio/selector_events.py:1)")
    assert classify(stack) == "HTTP: parse and framework (httpedge.server, httptools)"


def test_a_stack_of_only_the_event_loop_is_the_event_loop() -> None:
    assert classify(LOOP) == EVENT_LOOP


def test_ray_task_submission_is_told_from_ray_transport() -> None:
    submit = f"{LOOP};RayMethods.batch (proxy/shell/raycalls.py:43);ActorMethod._remote (ray/actor.py:1178)"
    loop = "<module> (ray/_private/workers/default_worker.py:323);Worker.main_loop (ray/_private/worker.py:1069)"
    assert (classify(submit), classify(loop)) == ("Ray: call submit", "Ray: transport (task loop, serialise, deliver)")


def test_raw_output_is_tallied_by_stage() -> None:
    raw = [f"{LOOP};noop (bench/proxy_apps.py:40) 7", f"{LOOP} 3", ""]
    assert tally(raw) == {"replica: user code": 7, EVENT_LOOP: 3}


def test_cpu_time_python_did_not_account_for_is_native() -> None:
    assert _seconds(tally([f"{LOOP} 100"]), rate=100, cpu_s=3.0) == {EVENT_LOOP: 1.0, NATIVE: 2.0}


def test_shares_add_up_to_one_across_both_processes() -> None:
    rows = table({"proxy": {"metrics": 1.0, NATIVE: 1.0}, "replica": {EVENT_LOOP: 2.0}})
    assert [row["share"] for row in rows] == [0.5, 0.25, 0.25] and rows[0]["process"] == "replica"


def test_frames_on_the_unix_socket_are_their_own_stage_on_both_sides() -> None:
    proxy = f"{LOOP};ReplicaConnection.send (proxy/pool/socketcalls.py:120);encode (datalink/frames.py:80)"
    replica = f"{LOOP};_Connection.data_received (replica/data_socket.py:150)"
    assert classify(proxy) == classify(replica) == "data path: frames over the Unix socket"


def test_the_modules_crossed_are_ours_only_each_named_once() -> None:
    raw = [f"{LOOP};ProxyApp.__call__ (proxy/app.py:190);Counter.inc (prometheus_client/metrics.py:300) 4",
           f"{LOOP};ProxyApp.__call__ (proxy/app.py:191);encode (datalink/frames.py:80) 2",
           f"{LOOP};run (bench/proxy_apps.py:40) 1", ""]
    assert crossed(raw) == {"proxy/app.py", "datalink/frames.py"}
