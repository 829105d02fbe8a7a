"""ray-gitops hardening: what a process of ours does to protect what it holds.

Every side may import it (the agent, the controller, the proxies and the
replicas); it imports nothing of ours, so no contract between the parts
changes by using it.

- `core_dumps`: this process writes no core dump and is not dumpable, for
  every process that holds tokens or secret values.
"""
