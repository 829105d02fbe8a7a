"""The only package that touches git (gitpython) and the file system watcher.

- `trees`: read-only views of a commit's tree or a plain directory, with
  git tree hashes, for the spec loader.
- `repos`: clone / fetch a repository, resolve the newest revision of a
  branch, export a commit's tree for replicas' `working_dir`.
- `watching`: triggers — polling with jitter and a watchdog observer on a
  local repository's refs.
"""
