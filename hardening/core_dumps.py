"""No core dumps of a process that holds secrets: the one place that turns them off.

Owns `no_core_dumps`: RLIMIT_CORE to 0 (soft and hard, so nothing in the
process raises it again) and, where the kernel has `prctl`, not dumpable
(`PR_SET_DUMPABLE` 0: no ptrace and no /proc/PID/mem by other processes of
the same user). Called by the agent at start (`gitops.commands.run`), the
controller actor (`controller.actor`: it holds the values it seals for
replicas), each proxy worker (`proxy.actor`: the data link's handshake
secrets and clients' credentials in flight) and each replica holding secret
values (`replica.secrets`). Where either call is refused the process goes on
(a limit already lower, no prctl outside Linux).
"""

from __future__ import annotations

import ctypes
import resource

__all__ = ["no_core_dumps"]

_PR_SET_DUMPABLE = 4


def no_core_dumps() -> None:
    """This process writes no core dump (which would hold its secrets) and, where
    the kernel allows, is not dumpable (no ptrace or /proc/PID/mem by others of its user)."""
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no prctl (not Linux): the limit alone
