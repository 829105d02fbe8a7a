"""The spec pipeline: TOML files at a commit become a validated desired state.

- `models`: one `[backends.X]` / `[endpoints.X]` table as pydantic models;
- `locating`: FILE:LINE:COL for a key path in a TOML document;
- `documents`: the files of a tree parsed into declared tables, cross-file rules;
- `imports`: static checks that a backend's import path exists at the commit;
- `servicers`: a backend's gRPC servicer read without importing it: the service, its methods' kinds;
- `code`: what a backend's code is in a tree (never the spec files), and its hashes;
- `versions`: a backend's version derived from git tree hashes;
- `limits`: every bound on what a spec tree may hold;
- `secrets`: a `[secrets.NAME]` file's age shape and size, checked without a key;
- `environments`: `environments/NAME.toml` on top of the tree (overrides, promotion, sync windows);
- `pins/`: a model's pin: bound to the backends naming it (its digest part
  of their version), the `[automation.NAME]` tables that move it, and the
  new pin written into its spec file, comments and layout kept;
- `loading`: all of the above, returning a `DesiredState` or every error at once.

No Ray, no HTTP. Pure but for `loading`, which reads the commit's files
through `gitops.sources.trees`. Each module imports only the layers below
it (a layers contract in `pyproject.toml`): `loading`; `pins/`, `versions`,
`code`, `servicers`, `secrets`; `environments`, `imports`; `documents`;
`models`, `locating`; `limits`.
"""
