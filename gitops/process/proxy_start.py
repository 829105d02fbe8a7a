"""A starting agent's proxies: serving, or one line saying why they cannot.

Before Ray starts, `check_addresses_free` tries the proxy's addresses (HTTP
and metrics) on this node: one in use is a one-line error at once, naming
who holds it, as a busy admin port is. Joined to a cluster, the holder may
be this namespace's own proxy (an agent restarting): a Ray proxy process, or
a holder that cannot be read, is left to the controller's word.

`gitops run` calls `wait_for_proxies` once the controller is up and before
the agent applies anything: it polls the controller's status until every
proxy runs (go on), one has failed to start (a `UserError` of one line,
so the agent exits 1 instead of applying commits nobody can reach while
Ray retries the proxy for ever), or `timeout_s` passed (go on: a slow node
is no failure). The line names the address and, when the address is in
use, who holds it (`gitops.process.port_holders`). `start_verdict` and
`failure_line` are pure.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
from typing import TYPE_CHECKING, Callable, Mapping

from gitops.errors import UserError
from gitops.process.port_holders import holder_of
from vocabulary.control.status import ClusterStatus, ProxyState, ProxyStatus

if TYPE_CHECKING:
    from controller.client import ControllerClient

__all__ = ["check_addresses_free", "start_verdict", "failure_line", "wait_for_proxies", "status_of"]

_LISTEN = re.compile(r"cannot listen on (?P<host>\S+?):(?P<port>\d+): (?P<why>.*)")
_POLL_S = 0.2


def check_addresses_free(host: str, addresses: dict[str, int], joined: bool) -> None:
    """Raise a one-line UserError when one of `addresses` (flag -> port) is in use on `host`."""
    for flag, port in addresses.items():
        if port == 0 or _free(host, port):
            continue
        holder = holder_of(host, port)
        if joined and (holder == "in use" or "ProxyActor" in holder):
            continue  # maybe this namespace's own proxy: the controller says
        what = "proxy metrics" if "metrics" in flag else "proxy"
        raise UserError(f"{what} cannot listen on {host}:{port}: {holder} (use {flag})")


def _free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def start_verdict(proxies: Mapping[str, ProxyStatus]) -> str | bool:
    """A failed proxy's error; True once every proxy runs; False while they are starting."""
    for proxy in proxies.values():
        if proxy.failures and proxy.state is not ProxyState.RUNNING and proxy.last_error:
            return proxy.last_error
    return bool(proxies) and all(proxy.state is ProxyState.RUNNING for proxy in proxies.values())


def failure_line(error: str, holder: Callable[[str, int], str] = holder_of) -> str:
    """The proxy's error as one line; an address in use says who holds it."""
    first = error.strip().splitlines()[-1] if error.strip() else "unknown error"
    # Ray wraps the actor's exception: its last line is the proxy's own message.
    first = re.sub(r"^\w+(\.\w+)*(Error|Exception): ", "", first)
    found = _LISTEN.search(first)
    if found is None:
        return f"the proxy cannot start: {first}"
    host, port, why = found["host"].strip("[]"), int(found["port"]), found["why"]
    if "in use" in why.lower():
        why = holder(host, port) if "by the proxies of" not in why else why
    return f"{first[: found.start()]}cannot listen on {found['host']}:{port}: {why}"


def wait_for_proxies(status: Callable[[], ClusterStatus], timeout_s: float) -> None:
    """Return once the proxies run (or `timeout_s` passed); raise UserError when one cannot start."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        verdict = start_verdict(status().proxies)
        if verdict is True:
            return
        if isinstance(verdict, str):
            raise UserError(failure_line(verdict))
        time.sleep(_POLL_S)


def status_of(client: ControllerClient) -> Callable[[], ClusterStatus]:
    """The controller's status, read synchronously."""
    return lambda: asyncio.run(client.get_status())
