"""Where specs come from; the only package that touches git (gitpython) and
the file system watcher.

- `source`: the `Source` protocol the agent takes and the `Revision` value.
- `hashing`: trees that hash themselves as git does, without git (the
  `Tree` protocol, `MemoryTree`); pure.
- `trees`: read-only views of a commit's tree, a plain directory or memory,
  with git tree hashes, for the spec loader.
- `repos`: `GitSource` — clone / fetch a repository, resolve the newest
  revision of a branch, export a commit's tree, write (and sign) the commits
  artifact automation pushes.
- `exports`: content-addressed export directories for replicas' working_dir.
- `verifying`: commit signatures checked against the operator's trusted
  keys (`git verify-commit`).
- `signing`: the SSH key the agent signs its own commits with
  (`--signing-key`), checked at start.
- `watching`: triggers — polling with jitter and a watchdog observer on a
  local repository's refs.
"""
