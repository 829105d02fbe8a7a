"""One module (or, for `models`, one sub-package) per CLI verb group; each exposes `<verb>_command(args) -> int`.

- `run`: the agent process (Ray, controller, reconcile loop, admin API).
- `validate`: offline spec validation; `plan`: the changes between two
  desired states; `schema`: the spec files' JSON Schema.
- `init`: scaffold a first deployment.
- `remote`: the verbs a running agent answers through its admin API:
  status, history, sync, suspend, resume, rollback, wait, logs and trace (a
  commit's apply trace).
- `secret`: `gitops secret encrypt` and `gitops secret edit`, authoring
  age-encrypted secret files.
- `models/`: `gitops models digest PATH|URL`, the digest a `[models.NAME]`
  table pins, and `gitops models resolve REF`, the pin of a moving reference
  (local files, S3 and HTTP(S), the Hugging Face Hub, OCI registries), which
  `validate` and `automation` read moving references with too.
- `reset`: discard the controller's stored state (`reset-controller`).
- `run_environment`: puts together the environment duties of `gitops run
  --environment`.
- `automation`: `gitops automation run`, and the artifact automation loop
  `gitops run` starts, put together.
- `capture`: `gitops capture tail` and `gitops capture grep`, reading the
  request/response records of a file capture sink.

`run` is over the other verbs, which are over what some of them read too
(`models/`, `plan`); a layers contract in `pyproject.toml` keeps the order.
"""
