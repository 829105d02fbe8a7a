"""`gitops init [DIR] [--example NAME]`: scaffold a first deployment, or a
working example of one feature, that a new user can commit and serve.

DIR defaults to the top level of the git repository holding the current
directory (found as git finds it), else the current directory.

Without `--example`: writes `deployments/hello.toml` (a commented spec: one
backend, one endpoint) and `deployments/hello.py` (the class it serves)
under DIR, then prints the next three commands. With `--example NAME`
(`EXAMPLES`: models, multiplexing, llm, secrets, environments): writes the
files of `gitops/commands/init-examples/NAME/`, package data, which are also the
examples the guides show (tests/component/test_init_examples.py keeps them
equal), then prints the commands that take it to a served request;
`--example` alone lists the names, and an unknown name is a usage error
(exit 2) listing them. An example's app code is a shipped app of
`deployments/apps/` (linked, not copied, in the source tree).

All or nothing: when any of the files already exists nothing is written
and the command fails naming every one, so a user's own files are never
overwritten. Nothing is written through a
symbolic link under DIR (a dangling `deployments/hello.py` link, or a
`deployments` link to elsewhere, would put files outside DIR): such a link
is refused, named, before anything is written, and each file is created
with `O_CREAT | O_EXCL | O_NOFOLLOW` relative to its directory's
descriptor, so a link made meanwhile is refused too. Must not: run git,
validate or start anything (the printed commands do that).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Mapping

from gitops.errors import UsageError, UserError

__all__ = [
    "SCAFFOLD", "EXAMPLES", "Example", "init_command", "example_files", "scaffold_dir", "write_scaffold", "next_steps",
]

_SPEC = '''\
# A first deployment, made by `gitops init`. Every *.toml file under
# deployments/ is part of one desired state; commit a change and the running
# agent applies it. Every key, its type and default: docs/reference/spec.md of ray-gitops.

# A backend is a class (or function) of this repository, run as Ray actors.
[backends.hello-v1]
import_path = "deployments.hello:Hello"   # module:attribute, from the repository root
init_args = ["v1"]                        # passed to Hello(...) once per replica
num_replicas = 1
ray_actor_options = { num_cpus = 0.1 }
# user_config = { greeting = "hi" }       # handed to reconfigure() without a restart
# max_concurrent_queries = 100            # requests one replica handles at once
# health_check_period_s = 10              # how often check_health() runs

# An endpoint is an HTTP route on the proxy and how its traffic is split.
[endpoints.hello]
route = "/hello"
methods = ["GET", "POST"]
traffic = { hello-v1 = 1.0 }              # weights summing to 1; add a backend for a canary
# timeout_s = 30                          # the proxy answers 504 after this
'''

_APP = '''\
"""The backend of deployments/hello.toml: answers with a greeting and its version."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request


class Hello:
    def __init__(self, version: str) -> None:
        self.version = version
        self.greeting = "hello"

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        # Called on every replica when the spec's user_config changes.
        self.greeting = str(user_config.get("greeting", self.greeting))

    async def __call__(self, request: Request) -> dict[str, Any]:
        # A dict is answered as JSON; str, bytes and Starlette responses work too.
        return {"greeting": self.greeting, "version": self.version, "path": request.url.path}
'''

SCAFFOLD: Mapping[str, str] = {
    "deployments/hello.toml": _SPEC,
    "deployments/hello.py": _APP,
}


@dataclass(frozen=True)
class Example:
    """One `gitops init --example NAME`: its files are package data under init-examples/NAME/."""

    description: str  # one line, for the list
    guide: str  # the docs page that explains it and shows its files
    add: str  # what `git add` takes once the steps before it ran
    before: tuple[str, ...] = ()  # commands before `gitops validate`
    validate: str = "gitops validate"
    after: tuple[str, ...] = ()  # commands between the commit and `gitops run`
    run: str = "gitops run"
    then: str = ""  # the request that shows it serves


EXAMPLES: Mapping[str, Example] = {
    "models": Example(
        "weights pinned by sha256 in git, fetched from S3 by every node (a lexicon sentiment model)",
        "docs/guides/models.md", "deployments models",
        before=(
            "gitops models digest models/sentiment/v1/   # the sha256 deployments/sentiment.toml pins",
            "aws s3 cp --recursive models/sentiment/v1/ s3://models/sentiment/v1/   # or any S3 client",
        ),
        after=("# the store's credentials, and AWS_ENDPOINT_URL=http://HOST:PORT for MinIO, moto or another S3-compatible one:",),
        run="AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... AWS_REGION=... gitops run",
        then="curl 'localhost:8000/sentiment?text=a+great+day'",
    ),
    "multiplexing": Example(
        "many small models on few replicas: each request names its model in X-Model-Id (translators)",
        "docs/guides/models.md#many-models-per-replica-multiplexing", "deployments",
        then="curl -H 'X-Model-Id: en-fr' 'localhost:8000/translate?text=hello+world'",
    ),
    "llm": Example(
        "an OpenAI-style chat endpoint (an engine-free simulator) with prefix-affinity routing and per-tenant limits",
        "docs/guides/llm.md", "deployments",
        then="curl -sN localhost:8000/v1/chat/completions -H 'authorization: Bearer me' "
        "-d '{\"model\": \"sim\", \"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}'",
    ),
    "secrets": Example(
        "an API token kept in git encrypted with age, given to one backend only",
        "docs/guides/secrets.md", ".gitops-recipients deployments secrets",
        before=(
            "gitops secret keygen >> .gitops-recipients   # your key: ~/.config/gitops/age-identity.txt",
            "TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(16))')",
            "mkdir -p secrets && printf '%s' \"$TOKEN\" | gitops secret encrypt > secrets/api-token.age",
        ),
        validate="gitops validate --age-identity ~/.config/gitops/age-identity.txt",
        run="gitops run --age-identity ~/.config/gitops/age-identity.txt",
        then='curl -H "authorization: Bearer $TOKEN" localhost:8000/orders',
    ),
    "environments": Example(
        "one spec tree, dev, staging and prod: environment files and promotion between branches",
        "docs/guides/environments.md", "deployments environments",
        after=(
            "git branch env/dev && git branch env/staging && git branch env/prod",
            "gitops plan --environment prod               # what prod would run",
        ),
        run="gitops run --branch env/dev --environment dev",
        then="curl localhost:8000/echo",
    ),
}


def init_command(args: argparse.Namespace) -> int:
    if args.example == "":
        print(example_list())
        return 0
    if args.example is not None and args.example not in EXAMPLES:
        raise UsageError(f"no example named '{args.example}'; the examples are:",
                         tuple(example_list().splitlines()))
    target = Path(args.dir) if args.dir is not None else scaffold_dir(Path.cwd())
    if args.example is None:
        files, steps = SCAFFOLD, next_steps(target)
    else:
        files, steps = example_files(args.example), example_steps(target, args.example)
    written = write_scaffold(target, files)
    for path in written:
        print(f"created {path}")
    print()
    print(steps)
    return 0


def example_list() -> str:
    """One line per example: its name and what it shows."""
    width = max(map(len, EXAMPLES))
    return "\n".join(f"  {name:<{width}}  {example.description}" for name, example in EXAMPLES.items())


def example_files(name: str) -> dict[str, str]:
    """The files of example `name`, by their path in the repository (package data under init-examples/NAME/)."""
    files: dict[str, str] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda child: child.name):
            if child.name == "__pycache__" or child.name.endswith(".pyc"):
                continue  # pip compiles the .py files of package data too
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
            else:
                files[f"{prefix}{child.name}"] = child.read_text(encoding="utf-8")

    walk(resources.files("gitops.commands").joinpath("init-examples", name), "")
    return files


def example_steps(target: Path, name: str) -> str:
    """The commands that take example `name`, written under `target`, to a served request."""
    example = EXAMPLES[name]
    lines = [
        *([] if target.resolve() == Path.cwd().resolve() else [f"cd {target}"]),
        *([] if _in_git_repository(target) else ["git init"]),
        *example.before,
        example.validate,
        f'git add {example.add} && git commit -m "Add the {name} example"',
        *example.after,
        f"{example.run}   # then: {example.then}",
    ]
    return f"Next ({example.guide} explains it):\n" + "\n".join(lines)


def scaffold_dir(cwd: Path) -> Path:
    """The top level of the git repository holding `cwd` (relative to it), as
    git finds its root from any subdirectory; `cwd` itself outside a repository."""
    for directory in (cwd, *cwd.parents):
        if (directory / ".git").exists():
            return Path(os.path.relpath(directory, cwd))
    return Path(".")


def write_scaffold(target: Path, files: Mapping[str, str]) -> list[Path]:
    """Write `files` under `target`, or nothing at all if any already exists or is a link."""
    for name in files:
        _refuse_links(target, name)
    existing = [target / name for name in files if os.path.lexists(target / name)]
    if len(existing) == 1:
        raise UserError(f"{existing[0]} already exists; nothing was written (move it away or pick another DIR)")
    if existing:
        raise UserError(f"{', '.join(map(str, existing))} already exist; nothing was written "
                        "(move them away or pick another DIR)")
    written = []
    for name, text in files.items():
        _create(target, name, text)
        written.append(target / name)
    return written


def _refuse_links(target: Path, name: str) -> None:
    """A UserError when a directory or the file of `name` under `target` is a symbolic link."""
    path = target
    for part in Path(name).parts:
        path = path / part
        if path.is_symlink():
            raise UserError(f"{path} is a symbolic link; nothing was written (gitops init writes only "
                            "inside DIR: remove the link or pick another DIR)")


def _create(target: Path, name: str, text: str) -> None:
    """Create `target/name` and its directories, following no link below `target`."""
    *directories, filename = Path(name).parts
    target.mkdir(parents=True, exist_ok=True)
    fds = [os.open(target, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for directory in directories:
            try:
                os.mkdir(directory, 0o777, dir_fd=fds[-1])
            except FileExistsError:
                pass
            fds.append(_open_at(fds[-1], directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, target / name))
        out = _open_at(fds[-1], filename, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, target / name)
        with os.fdopen(out, "w") as file:
            file.write(text)
    finally:
        for fd in fds:
            os.close(fd)


def _open_at(directory: int, name: str, flags: int, shown: Path) -> int:
    """Open `name` in the directory `directory`; a link or a file in the way is a UserError."""
    try:
        return os.open(name, flags, 0o666, dir_fd=directory)
    except OSError as error:
        raise UserError(f"{shown}: {error.strerror} (a symbolic link or a file appeared while writing; "
                        "gitops init writes only inside DIR)") from None


def next_steps(target: Path) -> str:
    """The three commands that take the scaffold to a served request."""
    where = "" if target.resolve() == Path.cwd().resolve() else f"cd {target}\n"
    git_init = "" if _in_git_repository(target) else "git init && "
    return (
        f"Next:\n{where}"
        "gitops validate                      # check the specs offline\n"
        f'{git_init}git add deployments && git commit -m "Add the hello deployment"\n'
        "gitops run                           # then: curl localhost:8000/hello"
    )


def _in_git_repository(path: Path) -> bool:
    candidate = path.resolve()
    for directory in (candidate, *candidate.parents):
        if (directory / ".git").exists():
            return True
    return False
