"""The agent process around the loop: Ray, proxies, logs, traces, its title.

- `supervising`: keeps `gitops run --ray-address` running when its Ray
  cluster restarts (a child process started again).
- `proxy_start`: a starting agent waits for its proxies; one that cannot
  start is a one-line error naming who holds its port (`port_holders`).
- `port_holders`: who listens on a TCP address.
- `ray_versions`: agent and cluster Ray versions agree, or one clear line.
- `ray_ports`: the embedded Ray's GCS and worker ports the flags ask, checked.
- `quieting`: Ray's raw C++ log lines kept out of the agent's output.
- `logs`: structured logs, one line per event, text or JSON.
- `tracing`: applied commits' traces sent over OTLP/HTTP.
- `proctitle`: the command line other users' ps(1) shows, rewritten.

Owns the process's edges: what it starts, watches and writes to stdout.
Must not: reconcile, plan or serve the admin API, nor import the loop, the
admin API or the CLI.
"""
