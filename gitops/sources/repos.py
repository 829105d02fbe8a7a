"""Git repositories the agent watches: fetch, newest revision, exports.

Owns every git call the agent makes at run time (the loader reads trees
through `gitops.sources.trees`). A repository is given as a local path or
a URL (file://, https, ssh, scp-style `user@host:path`):

- a local path is read in place: only its object database and refs are
  read, never its working directory, so uncommitted edits are invisible;
- a URL is fetched into a bare cache repository under the state dir, with a
  forced refspec, so a force-push simply moves the branch: the newest
  commit of the branch is the truth.

`GitSource` implements `gitops.sources.source.Source`: `tree` reads a
commit's files for the loader, `export` writes a commit's tree, without
`.git`, into the content-addressed `Exports` for replicas' runtime_env
`working_dir`. An export never follows a link outside the tree: a commit
holding a symbolic link that leads outside (absolute, or '..' above the
root, also through other links) is refused with a `SourceError` naming the
link, before anything is written, and the refusal is remembered for that
tree (a tree never changes). Must not: parse specs or talk to Ray.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tarfile
from pathlib import Path
from typing import Iterable

import git

from gitops.errors import SourceError
from gitops.sources.exports import Exports
from gitops.sources.hashing import escaping_links
from gitops.sources.source import Revision
from gitops.sources.trees import CommitTree

__all__ = ["GitSource", "is_url"]

_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:")
# Never wait for a password or a host-key prompt: the agent runs unattended.
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": "ssh -o BatchMode=yes"}


def is_url(repo: str) -> bool:
    return "://" in repo or bool(_SCP_LIKE.match(repo))


class GitSource:
    """The watched branch of one repository, read in place or from a cache clone."""

    def __init__(self, repo: str, branch: str | None, cache_dir: Path) -> None:
        self.location = repo
        self.remote = is_url(repo)
        self._exports = Exports(cache_dir / "exports")
        self._refused: dict[str, str] = {}  # tree hash -> why it cannot be exported
        self._repo = self._open_cache(repo, cache_dir) if self.remote else self._open_local(repo)
        self.branch = branch or self._default_branch()

    @property
    def path(self) -> Path:
        """Where commits are read from (the repository or its cache)."""
        return Path(self._repo.git_dir if self._repo.bare else self._repo.working_tree_dir)

    @property
    def refs_dir(self) -> Path | None:
        """The git dir holding branch refs, for the file-system watch (local only)."""
        return None if self.remote else Path(self._repo.common_dir)

    # --- revisions -----------------------------------------------------------

    def newest(self) -> Revision:
        """Fetch if remote, then the branch's newest commit."""
        if self.remote:
            self.fetch()
        try:
            commit = git.Reference(self._repo, f"refs/heads/{self.branch}").commit
        except (ValueError, git.BadName, git.GitCommandError) as error:
            raise SourceError(f"{self.location}: branch {self.branch!r} not found ({error})") from None
        return Revision(
            sha=commit.hexsha,
            tree=commit.tree.hexsha,
            branch=self.branch,
            commit_time=float(commit.committed_date),
            author_time=float(commit.authored_date),
            author=str(commit.author.name),
            summary=str(commit.summary),
        )

    def fetch(self) -> None:
        refspec = f"+refs/heads/{self.branch}:refs/heads/{self.branch}"
        try:
            with self._repo.git.custom_environment(**_GIT_ENV):
                self._repo.git.fetch("--quiet", "--no-tags", self.location, refspec)
        except git.GitCommandError as error:
            raise SourceError(f"fetch {self.location} {self.branch}: {_git_message(error)}") from None

    # --- exports ---------------------------------------------------------------

    def tree(self, revision: Revision) -> CommitTree:
        # The open repository is reused: one set of git helper processes
        # instead of one per commit read.
        return CommitTree(self._repo, revision.sha)

    def export(self, revision: Revision) -> Path:
        """The commit's files without `.git`, in a directory named by its tree."""
        return self._exports.ensure(revision.tree, lambda scratch: self._fill(revision, scratch))

    def _fill(self, revision: Revision, scratch: Path) -> None:
        """Write the export, unless a link in the tree leads outside it (checked once per tree)."""
        if revision.tree not in self._refused:
            problem = _escaping_link(self.tree(revision))
            if problem is not None:
                self._refused[revision.tree] = f"export {revision.short}: {problem}"
        if revision.tree in self._refused:
            raise SourceError(self._refused[revision.tree])
        self._extract(revision.tree, scratch)

    def prune_exports(self, in_use: Iterable[str | Path | None]) -> list[str]:
        """Remove exports not in `in_use` (paths); returns the removed tree hashes."""
        return self._exports.prune(in_use)

    # --- opening ---------------------------------------------------------------

    @staticmethod
    def _open_local(repo: str) -> git.Repo:
        try:
            return git.Repo(repo, search_parent_directories=True)
        except (git.NoSuchPathError, git.InvalidGitRepositoryError):
            raise SourceError(f"{repo}: not a git repository") from None

    def _open_cache(self, url: str, cache_dir: Path) -> git.Repo:
        key = hashlib.sha256(url.encode()).hexdigest()[:16]
        path = cache_dir / "repos" / key
        if (path / "HEAD").exists():
            return git.Repo(path)
        path.mkdir(parents=True, exist_ok=True)
        return git.Repo.init(path, bare=True)

    def _default_branch(self) -> str:
        if not self.remote:
            try:
                return self._repo.active_branch.name
            except TypeError:
                raise SourceError(f"{self.location}: HEAD is detached; pass --branch") from None
        return self._remote_head()

    def _remote_head(self) -> str:
        try:
            with self._repo.git.custom_environment(**_GIT_ENV):
                out = self._repo.git.ls_remote("--symref", self.location, "HEAD")
        except git.GitCommandError as error:
            raise SourceError(f"{self.location}: {_git_message(error)}") from None
        for line in out.splitlines():
            if line.startswith("ref: refs/heads/"):
                return line.split()[1].removeprefix("refs/heads/")
        raise SourceError(f"{self.location}: no default branch; pass --branch")

    def _extract(self, tree: str, into: Path) -> None:
        archive = subprocess.run(
            ["git", "--git-dir", str(self._repo.git_dir), "archive", "--format=tar", tree],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise SourceError(f"export {tree}: {archive.stderr.decode(errors='replace').strip()}")
        try:
            with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
                # The second line of defence: links were checked before.
                tar.extractall(into, filter="data")
        except tarfile.FilterError as error:
            raise SourceError(f"export {tree}: {error}") from None


def _escaping_link(tree: CommitTree) -> str | None:
    """The first symbolic link of the tree that leads outside it, described."""
    for path, target in escaping_links(tree, tree.files("")):
        return f"{path} is a symbolic link to '{target}', outside the repository"
    return None


def _git_message(error: git.GitCommandError) -> str:
    stderr = str(error.stderr or "").strip().removeprefix("stderr:").strip().strip("'").strip()
    return stderr.splitlines()[-1] if stderr else f"git exited {error.status}"

