"""ray-gitops replica host: the Ray actor that runs user code.

Owns loading a backend's handler from its commit's code, calling it with a
Starlette request, turning its return value into a wire response, health
checks, reconfigure and graceful drain. Started and stopped by the
controller's Ray adapter by class path (`vocabulary.goal_api.REPLICA_CLASS`);
talks to the proxy only through `vocabulary.wire` (as Ray calls, or as
`datalink.frames` over its same-node Unix socket, `replica.data_socket`).
"""
