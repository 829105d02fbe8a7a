"""Where specs come from; the only package that touches git (gitpython) and
the file system watcher.

- `source`: the `Source` protocol the agent takes and the `Revision` value.
- `trees`: read-only views of a commit's tree, a plain directory or memory,
  with git tree hashes, for the spec loader.
- `repos`: `GitSource` — clone / fetch a repository, resolve the newest
  revision of a branch, export a commit's tree.
- `exports`: content-addressed export directories for replicas' working_dir.
- `watching`: triggers — polling with jitter and a watchdog observer on a
  local repository's refs.
"""
