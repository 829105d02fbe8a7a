"""The spec pipeline: TOML files at a commit become a validated desired state.

- `models`: one `[backends.X]` / `[endpoints.X]` table as pydantic models;
- `locating`: FILE:LINE:COL for a key path in a TOML document;
- `documents`: the files of a tree parsed into declared tables, cross-file rules;
- `imports`: static checks that an `import_path` exists at the commit;
- `code`: what a backend's code is in a tree (never the spec files), and its hashes;
- `versions`: a backend's version derived from git tree hashes;
- `loading`: all of the above, returning a `DesiredState` or every error at once.

Pure: no Ray, no HTTP; git is read only through `gitops.sources.trees`.
"""
