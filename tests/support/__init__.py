"""What the tests share that is not a fixture: one place, imported by every tier.

A test module imports helpers from here (or fixtures from its conftest),
never from another test module or another tier's folder
(tests/pure/test_tiers.py checks it).

- `admin`: A stand-in agent behind the admin API, and requests to it, for the admin, CLI and
  security tests.
- `agent_loop`: The reconcile loop driven by hand, for the agent tests of every tier: the echo app
  and a spec of it,.
- `agents`: The service the agent-driven scenarios serve from git, and reads of the agent.
- `capture`: What the capture tests share: counts of what request capture wrote, and the proxy app
  capturing an endpoint to a tmp directory (`capture_app`) with its records read back (`records`).
- `collected`: A pytest plugin that writes what was collected, one JSON line per test.
- `data_path`: What the data-path tests share: the replica's apps, a stand-in for a Ray.
- `delivery`: A proxy delivering to answering replicas, and reads of what it delivered, for the
  delivery tests.
- `docs`: Where the repository's documents are, for the tests that read them.
- `environments`: Environment agents for the real tests of docs/guides/environments.md.
- `examples`: The shipped examples (deployments/) served by a real controller and proxy.
- `faults`: Faults the scenarios inject, and what they look for afterwards.
- `forges`: A loopback HTTP server posing as the GitHub and GitLab pull-request APIs, for promotion
  tests.
- `gitfaults`: What the git scenarios share: an agent on a remote, and break-then-mend under load.
- `gitserver`: A real git HTTP server on loopback: `git http-backend` behind basic auth.
- `gitservers`: Real git remotes on loopback, and the ways a remote goes wrong.
- `goals`: The controller's goal API driven by hand: its options, polling a goal, stopping.
- `install`: The install tier's fixtures: the wheel as built for users, installed the way users
  install it.
- `kustomize_subset`: A renderer for the part of kustomize that contrib/kubernetes/ uses, for its
  tests.
- `listeners`: Real listeners on loopback for the security and admin tests, and a raw-socket client.
- `load`: A steady load on loopback: keep-alive clients that count every answer.
- `metrics`: Reading one value out of a metrics page.
- `notifiers`: A notifier that records what it was sent, for the agent tests.
- `otlp`: A loopback OTLP/HTTP trace receiver for tests: what the exporters sent, decoded.
- `process_ports`: The TCP ports processes listen on, from /proc, for the tests of who takes which
  port.
- `prometheus`: A real Prometheus on loopback for the real tier: the Debian `prometheus`.
- `proxy_app`: The proxy app over fake replicas and callers, run in one process, for the proxy tests
  of every tier.
- `rayheads`: A Ray cluster of a scenario's own, started as a user starts one: `ray start --head`.
- `rayversions`: The error Ray raises when two of its versions meet.
- `receivers`: A real HTTP receiver on loopback that records every request, for notification tests.
- `results`: What each reliability scenario measured, appended to one JSON-lines file.
- `rollouts`: A rollout as the fake controller reports it, for the agent tests.
- `runner`: Runs the test tiers one after another, fastest first, and says where the time went.
- `s3`: The real tier's S3-compatible store: moto's server on 127.0.0.1, and the node's AWS_*
  variables.
- `scenario`: One scenario's shape: steady load, a fault, recovery, steady load, record.
- `serving`: A controller, its proxy and backends on the session's Ray, for the scenarios.
- `specs`: A small service (its app and its spec) for the loading tests.
- `stack`: Helpers shared by the real-tier tests (and the benchmarks built on them).
- `status`: A cluster status to render, for the status page and CLI tests.
- `status_environment`: An environment's status as the status page reads it, for the status tests.
- `status_tables`: An agent's status as the status tables read it, for the status tests.
- `streams`: Streaming replicas and callers, and a client that reads a stream, for the proxy's
  streaming tests.
- `tiers`: The test tiers by cost, and the tier of each collected test.
- `websockets`: WebSocket replicas and callers, and a client, for the proxy's WebSocket tests.
"""
