"""Git repositories the agent watches: fetch, newest revision, exports.

Owns every git call the agent makes at run time (the loader reads trees
through `gitops.sources.trees`). A repository is given as a local path or
a URL (file://, https, ssh, scp-style `user@host:path`):

- a local path is read in place: only its object database and refs are
  read, never its working directory, so uncommitted edits are invisible;
- a URL is fetched into a bare cache repository under the state dir, with a
  forced refspec, so a force-push simply moves the branch: the newest
  commit of the branch is the truth.

Every network call (fetch, ls-remote) ends after `fetch_timeout_s`: a
remote that accepts and never answers costs one timeout, not the agent. A
failed fetch is a `SourceError` with reason GitUnreachable, or BranchNotFound
when the remote answers without the watched branch.

`commit_file` writes one new commit (a file changed on a parent) into the
object database alone, for artifact automation to push; with a
`SigningKey` (`--signing-key`, `gitops.sources.signing`) the commit is
signed with it (`git commit-tree -S`, SSH format), and a commit that could
not be signed is a `SourceError`, never an unsigned commit. Automation runs
on its own thread through a `twin` (GitPython's readers are not thread-safe).

`GitSource` implements `gitops.sources.source.Source`: `tree` reads a
commit's files for the loader, `export` writes a commit's tree, without
`.git`, into the content-addressed `Exports` for replicas' runtime_env
`working_dir`. With a `CommitVerifier` (`--verify-commits`), each newest
revision carries its signature's verdict. An export never follows a link
outside the tree: a commit holding a symbolic link that leads outside
(absolute, or '..' above the root, also through other links) is refused
with a `SourceError` naming the link, before anything is written, and the
refusal is remembered for that tree (a tree never changes).

Credentials never reach a command line, nor another host: an https URL's
userinfo (or a token given apart, `password=`) is taken off the URL git is
given and answered by a credential helper configured for the remote's
exact scheme, host and port only (`credential.<scheme>://<host:port>.helper`,
set through `GIT_CONFIG_*` variables that hold no secret). The helper is a
shell function that prints the credentials from the environment of that
one git call with the shell's built-in `printf` (no process gets them as
arguments). Every other credential helper and askpass program is switched
off for those calls, so nothing stores the secret and a redirect to
another host is answered by nobody (git fails with "could not read
Username"). ssh is told never to prompt (`BatchMode=yes`), added to the
user's own `GIT_SSH_COMMAND` or `core.sshCommand` (the way to pick a
deploy key), which is kept. `location` is the URL as shown to people:
without userinfo. Must not: parse specs or talk to Ray.
"""

from __future__ import annotations

import copy
import hashlib
import io
import os
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Iterable, Mapping
from urllib.parse import urlsplit

import git

from gitops.reconcile.prune_guard import says_prune_all
from gitops.errors import SourceError
from gitops.redaction import Credentials, SshPasswordError, redact, split_credentials
from gitops.sources.exports import Exports
from gitops.sources.hashing import escaping_links
from gitops.sources.signing import SigningKey
from gitops.sources.source import Revision
from gitops.sources.trees import CommitTree
from gitops.sources.verifying import CommitVerifier, SignatureKind, signature_kind

__all__ = ["GitSource", "is_url", "credential_env", "ssh_command", "ssh_env", "DEFAULT_FETCH_TIMEOUT_S"]

DEFAULT_FETCH_TIMEOUT_S = 60.0
_SCP_LIKE = re.compile(r"^[\w.-]+@[\w.-]+:")
# Never wait for a password or a host-key prompt: the agent runs unattended.
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}
# Who the commits the agent writes (artifact automation's pins) are by.
_COMMITTER = {
    "GIT_AUTHOR_NAME": "ray-gitops automation", "GIT_AUTHOR_EMAIL": "ray-gitops@localhost",
    "GIT_COMMITTER_NAME": "ray-gitops automation", "GIT_COMMITTER_EMAIL": "ray-gitops@localhost",
}
_SSH_OPTIONS = "-o BatchMode=yes"
_SIGN_TIMEOUT_S = 30.0  # ssh-keygen -Y sign: a key never needs long
# git runs a helper starting with `!` through the shell, with `get`, `store`
# or `erase`; only `get` is answered, from this git call's environment.
# `printf` is the shell's own: the secret is never a process's argument.
_HELPER = (
    '!f() { test "$1" = get || return 0; '
    "printf 'username=%s\\npassword=%s\\n' \"$GITOPS_GIT_USERNAME\" \"$GITOPS_GIT_PASSWORD\"; }; f"
)


def is_url(repo: str) -> bool:
    return "://" in repo or bool(_SCP_LIKE.match(repo))


class GitSource:
    """The watched branch of one repository, read in place or from a cache clone."""

    def __init__(
        self,
        repo: str,
        branch: str | None,
        cache_dir: Path,
        password: str | None = None,
        verifier: CommitVerifier | None = None,
        fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S,
    ) -> None:
        try:
            url, credentials = split_credentials(repo)
        except SshPasswordError as error:
            raise SourceError(str(error)) from None
        if password is not None:
            credentials = Credentials(credentials.username if credentials else "git", password)
        self.location = redact(url)
        self.remote = is_url(url)
        self._url = url
        self._verifier = verifier
        self._fetch_timeout_s = fetch_timeout_s
        self._exports = Exports(cache_dir / "exports")
        self._refused: dict[str, str] = {}  # tree hash -> why it cannot be exported
        self._repo = self._open_cache(url, cache_dir) if self.remote else self._open_local(url)
        self._env = dict(_GIT_ENV)
        if self.remote:
            self._env.update(ssh_env(os.environ, self._configured_ssh_command()))
            self._env.update(credential_env(url, credentials))
        self.branch = branch or self._default_branch()

    @property
    def path(self) -> Path:
        """Where commits are read from (the repository or its cache)."""
        return Path(self._repo.working_tree_dir or self._repo.git_dir)  # a bare repository has no working tree

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
            raise SourceError(f"{self.location}: branch {self.branch!r} not found ({error})", "BranchNotFound") from None
        return self._revision(commit)

    def revision(self, sha: str) -> Revision:
        try:
            commit = self._repo.commit(sha)
        except (ValueError, git.BadName, git.GitCommandError) as error:
            raise SourceError(f"{self.location}: commit {sha[:12]} not found ({error})") from None
        return self._revision(commit)

    def _revision(self, commit: git.Commit) -> Revision:
        return Revision(
            sha=commit.hexsha,
            tree=commit.tree.hexsha,
            branch=self.branch,
            commit_time=float(commit.committed_date),
            author_time=float(commit.authored_date),
            author=str(commit.author.name),
            summary=str(commit.summary),
            verification=self._verifier.verify(Path(self._repo.git_dir), commit.hexsha) if self._verifier else None,
            prune_all=says_prune_all(str(commit.message)),
        )

    def fetch(self) -> None:
        refspec = f"+refs/heads/{self.branch}:refs/heads/{self.branch}"
        try:
            self._remote_git("fetch", "--quiet", "--no-tags", self._url, refspec)
        except SourceError as error:
            if error.reason == "GitUnreachable" and self._branch_missing():
                raise SourceError(
                    f"fetch {self.location}: the remote has no branch {self.branch!r} (deleted?)", "BranchNotFound"
                ) from None
            raise SourceError(f"fetch {self.location} {self.branch}: {error}") from None

    def branch_head(self, branch: str) -> str | None:
        """Another branch's newest commit on the remote, fetched (for a
        promotion's plan); None when the remote has no such branch."""
        if not self.remote:
            found = self._repo.git.rev_parse("--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", with_exceptions=False)
            return str(found).strip() or None
        if not self._remote_git("ls-remote", "--heads", self._url, f"refs/heads/{branch}").strip():
            return None
        self._remote_git("fetch", "--quiet", "--no-tags", self._url, f"+refs/heads/{branch}:refs/gitops/branches/{branch}")
        return str(self._repo.git.rev_parse(f"refs/gitops/branches/{branch}^{{commit}}")).strip()

    def push(self, sha: str, branch: str, credentials: Credentials | None = None) -> bool:
        """Move `branch` of the remote to `sha`, only as a fast-forward: never
        a force push, so git refuses when the branch has commits `sha` lacks.
        `credentials` (a promotion's token) are used for this push alone.
        True when the branch moved; False when it was already at `sha`."""
        env = dict(self._env)
        if credentials is not None and self.remote:
            env.update(credential_env(self._url, credentials))
        try:
            with self._repo.git.custom_environment(**env):
                # --porcelain: one line per ref, '=' first when it was already there.
                answer = str(self._repo.git.push(
                    "--porcelain", "--no-verify", self._url, f"{sha}:refs/heads/{branch}",
                    kill_after_timeout=self._fetch_timeout_s,
                ))
        except git.GitCommandError as error:
            message = self._timeout_or(error)
            said = f"{error.stdout}\n{error.stderr}"  # with --porcelain, the refused ref is on stdout
            if "non-fast-forward" in said or "fetch first" in said:
                message = f"{branch} has commits that {sha[:7]} does not (not a fast-forward); nothing was pushed"
            raise SourceError(redact(f"push {self.location} {branch}: {message}"), "PushRefused") from None
        return not any(line.startswith("=\t") for line in answer.splitlines())

    def twin(self) -> GitSource:
        """The same repository, branch and credentials with git processes of its own: GitPython's
        object readers are one stream per `git.Repo` and must not be shared between threads, so
        work on another thread than the agent's ticks (artifact automation) reads through a twin."""
        twin = copy.copy(self)
        twin._repo = git.Repo(self._repo.git_dir)
        twin._refused = {}
        return twin

    def commit_file(
        self, parent: str, path: str, data: bytes, message: str, signing_key: SigningKey | None = None
    ) -> str:
        """A new commit on `parent` whose tree is `parent`'s with the file at `path` holding `data`
        (its mode kept), written into this repository's object database only: no working tree,
        no index and no ref is touched (a push moves a branch to it). With `signing_key`, signed
        with it (SSH format); when git cannot sign, a `SourceError` and no commit. Returns its sha."""
        try:
            with tempfile.TemporaryDirectory(prefix="gitops-commit-") as scratch:
                content, said = Path(scratch) / "content", Path(scratch) / "message"
                content.write_bytes(data)
                said.write_text(message)
                env = {**self._env, "GIT_INDEX_FILE": str(Path(scratch) / "index"), **_COMMITTER}
                with self._repo.git.custom_environment(**env):
                    blob = str(self._repo.git.hash_object("-w", "--no-filters", str(content))).strip()
                    self._repo.git.read_tree(parent)
                    listed = str(self._repo.git.ls_files("-s", "--", path)).split()
                    mode = listed[0] if listed else "100644"
                    self._repo.git.update_index("--add", "--cacheinfo", f"{mode},{blob},{path}")
                    tree = str(self._repo.git.write_tree()).strip()
                    if signing_key is None:
                        return str(self._repo.git.commit_tree(tree, "-p", parent, "-F", str(said))).strip()
                    return self._signed_commit(tree, parent, said, signing_key)
        except git.GitCommandError as error:
            raise SourceError(redact(f"commit {path} on {parent[:7]}: {_git_message(error)}")) from None

    def _signed_commit(self, tree: str, parent: str, message: Path, key: SigningKey) -> str:
        """`git commit-tree -S` with the key's options; the commit is checked to carry an SSH
        signature, so nothing unsigned is ever returned for a push."""
        try:
            sha = str(self._repo.git.execute(
                ["git", *key.git_options(), "commit-tree", "-S", tree, "-p", parent, "-F", str(message)],
                kill_after_timeout=_SIGN_TIMEOUT_S,
            )).strip()
        except git.GitCommandError as error:
            raise SourceError(redact(
                f"commit on {parent[:7]}: the --signing-key could not sign it ({_git_message(error)}); nothing pushed"
            ), "SigningFailed") from None
        raw = str(self._repo.git.cat_file("commit", sha))
        if signature_kind(raw) is not SignatureKind.SSH:
            raise SourceError(f"commit on {parent[:7]}: git wrote {sha[:7]} without an SSH signature; nothing pushed",
                              "SigningFailed")
        return sha

    def is_ancestor(self, older: str, newer: str) -> bool:
        """True when `older` is `newer` or one of its ancestors."""
        found = self._repo.git.merge_base("--is-ancestor", older, newer, with_exceptions=False, with_extended_output=True)
        return found[0] == 0

    def _branch_missing(self) -> bool:
        """True when the remote answers and lists no such branch (False if it does not answer)."""
        try:
            return not self._remote_git("ls-remote", "--heads", self._url, f"refs/heads/{self.branch}").strip()
        except SourceError:
            return False

    def _remote_git(self, command: str, *args: str) -> str:
        """One git call that talks to the remote, ended after the fetch timeout."""
        try:
            with self._repo.git.custom_environment(**self._env):
                return str(getattr(self._repo.git, command.replace("-", "_"))(
                    *args, kill_after_timeout=self._fetch_timeout_s))
        except git.GitCommandError as error:
            raise SourceError(redact(self._timeout_or(error))) from None

    def _timeout_or(self, error: git.GitCommandError) -> str:
        # GitPython kills the command at kill_after_timeout and says so on its stderr.
        if "did not complete in" in str(error.stderr or ""):
            return f"no answer within {self._fetch_timeout_s:g} s (--fetch-timeout)"
        return _git_message(error)

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

    def discard_unfinished_exports(self) -> list[str]:
        """Remove exports a crashed run left half-made (call with the state dir locked)."""
        return self._exports.discard_unfinished()

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

    def _configured_ssh_command(self) -> str | None:
        """The user's `core.sshCommand` (global or system config), if any."""
        try:
            return str(self._repo.git.config("--get", "core.sshCommand")) or None
        except git.GitCommandError:
            return None  # not set

    def _default_branch(self) -> str:
        if not self.remote:
            try:
                return self._repo.active_branch.name
            except TypeError:
                raise SourceError(f"{self.location}: HEAD is detached; pass --branch") from None
        return self._remote_head()

    def _remote_head(self) -> str:
        try:
            out = self._remote_git("ls-remote", "--symref", self._url, "HEAD")
        except SourceError as error:
            raise SourceError(f"{self.location}: {error}") from None
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


def credential_env(url: str, credentials: Credentials | None) -> dict[str, str]:
    """The environment of a git call that talks to `url`: only `credentials`, only to its host.

    Every credential helper of the user's config is switched off first (an
    empty `credential.helper` empties the list), so nothing stores the
    secret, and askpass programs too; then one helper answers for the URL's
    exact scheme, host and port (git compares those, and its path is
    ignored). Without credentials of the agent's own, the user's git
    configuration (`~/.git-credentials`, a credential manager) is used as
    it is.
    """
    if credentials is None:
        return {}
    for value in (credentials.username, credentials.password):
        if "\n" in value or "\0" in value:
            raise SourceError(f"{redact(url)}: the credentials hold a line break or NUL, which git cannot pass on")
    parts = urlsplit(url)
    return {
        # An empty GIT_ASKPASS ends git's search for an askpass program
        # (core.askPass, SSH_ASKPASS): nothing answers what the helper did not.
        "GIT_ASKPASS": "",
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "credential.helper",
        "GIT_CONFIG_VALUE_0": "",
        "GIT_CONFIG_KEY_1": f"credential.{parts.scheme}://{parts.netloc}.helper",
        "GIT_CONFIG_VALUE_1": _HELPER,
        "GITOPS_GIT_USERNAME": credentials.username,
        "GITOPS_GIT_PASSWORD": credentials.password,
    }


def ssh_command(user_command: str | None) -> str:
    """The user's ssh command (`GIT_SSH_COMMAND` or `core.sshCommand`) with ours added, or plain ssh."""
    return f"{user_command.strip() or 'ssh'} {_SSH_OPTIONS}" if user_command else f"ssh {_SSH_OPTIONS}"


def ssh_env(environ: Mapping[str, str], configured: str | None) -> dict[str, str]:
    """`GIT_SSH_COMMAND` for a git call: the user's, kept, with BatchMode added.

    `GIT_SSH_COMMAND` wins over `core.sshCommand` (`configured`), as in git.
    A bare `GIT_SSH` program is left alone (setting `GIT_SSH_COMMAND` would
    replace it; it gets no options from us).
    """
    user = environ.get("GIT_SSH_COMMAND") or configured
    if not user and environ.get("GIT_SSH"):
        return {}
    return {"GIT_SSH_COMMAND": ssh_command(user)}


def _git_message(error: git.GitCommandError) -> str:
    stderr = str(error.stderr or "").strip().removeprefix("stderr:").strip().strip("'").strip()
    last = stderr.splitlines()[-1] if stderr else f"git exited {error.status}"
    # A remote answering garbage gets its bytes quoted by git: keep the line printable.
    return "".join(c if c.isprintable() else "?" for c in last)

