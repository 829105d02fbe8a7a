"""A proxy that cannot start is one line naming its address and who holds it."""

from __future__ import annotations

import pytest

from gitops.errors import UserError
from gitops.process.port_holders import describe, listening_inodes
from gitops.process.proxy_start import failure_line, start_verdict, wait_for_proxies
from vocabulary.control.status import ClusterStatus, ProxyState, ProxyStatus

# /proc/net/tcp: 127.0.0.1:18200 listening (inode 111), 0.0.0.0:8000 listening (222),
# 127.0.0.1:18200 established (333, not a listener).
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4718 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 111 1 0 100 0 0 10 0
   1: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 222 1 0 100 0 0 10 0
   2: 0100007F:4718 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 333 1 0 100 0 0 10 0
"""


def test_a_listener_on_the_host_or_every_address_holds_the_port() -> None:
    assert listening_inodes(TCP, "127.0.0.1", 18200) == ["111"]
    assert listening_inodes(TCP, "127.0.0.1", 8000) == ["222"]  # 0.0.0.0 covers 127.0.0.1
    assert listening_inodes(TCP, "0.0.0.0", 18200) == ["111"]  # a wildcard bind meets every listener
    assert listening_inodes(TCP, "10.0.0.1", 18200) == []
    assert listening_inodes(TCP, "127.0.0.1", 9) == []


def test_a_holder_is_its_pid_and_command_on_one_line() -> None:
    assert describe(42, b"python\0-m\0http.server\0") == "pid 42 (python -m http.server)"
    assert describe(42, b"python\0-c\0import x\nx.run()\0") == "pid 42 (python -c import x x.run())"
    assert describe(42, b"") == "pid 42"
    assert len(describe(42, b"x" * 500)) < 140


def proxy(state: ProxyState, failures: int = 0, error: str = "") -> ProxyStatus:
    return ProxyStatus(actor_name="p", state=state, failures=failures, last_error=error)


def test_the_verdict_waits_for_every_proxy_and_stops_at_a_failure() -> None:
    assert start_verdict({}) is False
    assert start_verdict({"a": proxy(ProxyState.RUNNING), "b": proxy(ProxyState.STARTING)}) is False
    assert start_verdict({"a": proxy(ProxyState.RUNNING), "b": proxy(ProxyState.RUNNING)}) is True
    failed = proxy(ProxyState.BACKOFF, 1, "OSError: proxy cannot listen on 127.0.0.1:1: in use")
    assert start_verdict({"a": proxy(ProxyState.RUNNING), "b": failed}) == failed.last_error


def test_a_failure_in_use_names_the_holder_and_others_keep_their_words() -> None:
    ray_error = (
        "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task\n"
        "OSError: proxy cannot listen on 127.0.0.1:18200: Address already in use"
    )
    holder = lambda host, port: f"in use by pid 7 (holder of {host}:{port})"  # noqa: E731
    expected = "proxy cannot listen on 127.0.0.1:18200: in use by pid 7 (holder of 127.0.0.1:18200)"
    assert failure_line(ray_error, holder) == expected
    assert failure_line("OSError: proxy metrics cannot listen on ::1:8002: Permission denied", holder) == (
        "proxy metrics cannot listen on ::1:8002: Permission denied"
    )
    assert failure_line("ImportError: no module named proxy", holder) == "the proxy cannot start: no module named proxy"


def test_waiting_raises_the_failure_or_returns_once_they_run() -> None:
    failed = ClusterStatus(proxies={"a": proxy(ProxyState.BACKOFF, 1, "OSError: proxy cannot listen on 127.0.0.1:1: x")})
    with pytest.raises(UserError, match=r"^proxy cannot listen on 127.0.0.1:1: x$"):
        wait_for_proxies(lambda: failed, timeout_s=5)
    answers = iter([ClusterStatus(), ClusterStatus(proxies={"a": proxy(ProxyState.RUNNING)})])
    wait_for_proxies(lambda: next(answers), timeout_s=5)
    wait_for_proxies(ClusterStatus, timeout_s=0.3)  # starting for too long: go on
