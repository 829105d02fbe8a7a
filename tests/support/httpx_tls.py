"""One TLS context for every httpx client the test process makes with the default `verify`.

httpx builds a new `ssl.SSLContext` for each client, parsing certifi's CA
bundle each time: 48 ms of CPU per `httpx.Client()` here, and every
`httpx.get(...)` makes one. The tests poll loopback servers with those in
`eventually` loops (one try each 50 ms), so that parsing was a sixth of a
real-tier test process's CPU (py-spy on `test_routing_policies.py` and
`test_secrets.py`: 341 of 2,580 busy samples in `ssl.create_default_context`),
on machines whose two cores the tier already fills. A context is safe to
share between clients and threads; the tests' loopback servers speak plain
HTTP or TLS under their own `verify=`, which still get contexts of their own.

Test support only: the product's clients are few and long-lived.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx._transports.default as _transports

__all__ = ["share_default_tls_context"]


def share_default_tls_context() -> None:
    """Make httpx's transports reuse one context for `verify=True` without a client certificate."""
    make = _transports.create_ssl_context
    if getattr(make, "shares_default", False):
        return
    shared: dict[bool, ssl.SSLContext] = {}

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is not True or cert is not None:
            return make(verify=verify, cert=cert, trust_env=trust_env)
        if trust_env not in shared:
            shared[trust_env] = make(verify=verify, cert=cert, trust_env=trust_env)
        return shared[trust_env]

    create_ssl_context.shares_default = True  # type: ignore[attr-defined]
    _transports.create_ssl_context = create_ssl_context
