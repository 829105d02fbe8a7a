"""The controller's I/O shell: Ray, Prometheus over HTTP and its own C heap.

Owns every call the controller makes to the world outside its state:
`ray_adapter` (every `ray.*` call that manages actors: starting, probing,
draining and stopping replicas and proxies, the controller's
`ClusterAdapter`), `prometheus` (the rollouts' PromQL checks over HTTP),
`malloc_arenas` (the controller process's C heap: freed pages handed back)
and, below them, `ray_private` (the one module that uses Ray's private API,
also used by `controller.cluster`), and below it `setup_worker` (the script
the local Ray's raylet starts each worker with a runtime environment through,
in place of Ray's own). The checkpoint's storage is
`controller.persistence`'s. May not: decide anything a state machine or a
policy decides; it carries out their effects and reports what it saw.
"""
