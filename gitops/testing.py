"""Test doubles for the agent, shipped with the package (not used in production).

- `FakeController`: the one fake of `vocabulary.control.goal_api.GoalAPI`. It holds
  the serving state as plain values, records every call, and meets every
  goal unless told otherwise: `failing` (name -> the replica's error: the
  goal fails), `stuck` (goals stay pending), `refuse` (name -> the
  controller's refusal: the call raises ValueError), `unreachable` (every
  call raises ConnectionError with that text). Its observed status shows
  every replica RUNNING.
- `MemorySource`: a `gitops.sources.source.Source` over commits held in
  memory (`write`, `remove`, `commit`, `head`, like the git fixture), so the
  agent loop runs in the component tier without git. `fetch_error` makes
  `newest` fail as an unreachable remote would.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from gitops.reconcile.prune_guard import says_prune_all
from gitops.errors import SourceError
from gitops.sources.exports import Exports
from gitops.sources.source import Revision
from gitops.sources.hashing import MemoryTree
from vocabulary.control.goals import GoalResult, GoalState
from vocabulary.control.longpoll import ReplicaState
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState
from vocabulary.control.status import BackendStatus, ClusterStatus, EndpointStatus, ReplicaEjection, ReplicaStatus
from vocabulary.control.rollouts import Rollout
from vocabulary.control.request_stats import RequestStats

__all__ = ["FakeController", "MemorySource"]


class FakeController:
    """Implements the goal API over plain values; goals are met unless told otherwise."""

    def __init__(
        self,
        state: ServingState | None = None,
        *,
        failing: Mapping[str, str] | None = None,
        stuck: Iterable[str] = (),
        refuse: Mapping[str, str] | None = None,
    ) -> None:
        self.state = state or ServingState()
        self.failing: dict[str, str] = dict(failing or {})
        self.stuck: set[str] = set(stuck)
        self.refuse: dict[str, str] = dict(refuse or {})
        self.unreachable: str | None = None
        self.calls: list[tuple[str, str]] = []  # (verb, name), in order
        self.configs: list[BackendConfig] = []  # every backend config applied, in order
        self.rollouts: dict[str, Rollout] = {}  # reported as the controller's, by endpoint
        self.serving: dict[str, RequestStats] = {}  # each backend's requests of the last minute, as reported
        self.ejections: dict[str, tuple[ReplicaEjection, ...]] = {}  # each backend's replicas ejected now, as reported
        self._goals: dict[str, str] = {}  # goal id -> object name
        self._deletes: set[str] = set()  # the goal ids of deletes: `failing` fails the others (a delete always ends)

    # --- writes -------------------------------------------------------------------

    async def apply_backend(self, config: BackendConfig) -> str:
        self._call("apply_backend", config.name)
        self.configs.append(config)
        self._put("backends", config.name, config)
        return self._goal(config.name)

    async def delete_backend(self, name: str) -> str:
        self._call("delete_backend", name)
        self._put("backends", name, None)
        return self._goal(name, deleting=True)

    async def apply_endpoint(self, config: EndpointConfig) -> str:
        self._call("apply_endpoint", config.name)
        self._put("endpoints", config.name, config)
        return self._goal(config.name)

    async def delete_endpoint(self, name: str) -> str:
        self._call("delete_endpoint", name)
        self._put("endpoints", name, None)
        return self._goal(name, deleting=True)

    # --- reads ----------------------------------------------------------------------

    async def wait_for_goal(self, goal_id: str, timeout_s: float) -> GoalResult:
        self._reachable()
        name = self._goals[goal_id]
        if name in self.failing and goal_id not in self._deletes:
            return GoalResult(goal_id=goal_id, state=GoalState.FAILED, reason=self.failing[name])
        if name in self.stuck:
            await asyncio.sleep(timeout_s)
            return GoalResult(goal_id=goal_id, state=GoalState.PENDING)
        return GoalResult(goal_id=goal_id, state=GoalState.MET)

    async def get_state(self) -> ServingState:
        self._reachable()
        return self.state

    async def get_status(self) -> ClusterStatus:
        self._reachable()
        return ClusterStatus(
            backends={
                name: _running(name, b).model_copy(update={"ejections": self.ejections.get(name, ())})
                for name, b in self.state.backends.items()
            },
            endpoints={
                name: EndpointStatus(route=e.route, methods=e.methods, traffic=dict(e.traffic),
                                     shadow=dict(e.shadow), timeout_s=e.timeout_s)
                for name, e in self.state.endpoints.items()
            },
            rollouts=dict(self.rollouts),
            serving=dict(self.serving),
            serving_window_s=60.0 if self.serving else 0.0,
        )

    # --- internals ------------------------------------------------------------------

    def _reachable(self) -> None:
        if self.unreachable is not None:
            raise ConnectionError(self.unreachable)

    def _call(self, verb: str, name: str) -> None:
        self._reachable()
        self.calls.append((verb, name))
        if name in self.refuse:
            raise ValueError(self.refuse[name])

    def _goal(self, name: str, deleting: bool = False) -> str:
        goal_id = f"g{len(self._goals)}"
        self._goals[goal_id] = name
        if deleting:
            self._deletes.add(goal_id)
        return goal_id

    def _put(self, kind: str, name: str, value: Any | None) -> None:
        objects = dict(getattr(self.state, kind))
        if value is None:
            objects.pop(name, None)
        else:
            objects[name] = value
        self.state = self.state.model_copy(update={kind: objects})


def _running(name: str, config: BackendConfig) -> BackendStatus:
    replicas = tuple(
        ReplicaStatus(replica_id=f"{name}-{i}", state=ReplicaState.RUNNING, version=config.version, node_id="node")
        for i in range(config.num_replicas)
    )
    return BackendStatus(
        version=config.version, target_replicas=config.num_replicas, replicas=replicas, commit=config.commit
    )


class MemorySource:
    """One branch whose commits live in memory; implements `Source`."""

    def __init__(self, exports_dir: Path, *, location: str = "memory://specs", branch: str = "main") -> None:
        self.location = location
        self.branch = branch
        self.refs_dir: Path | None = None  # nothing to watch: notify the agent instead
        self.fetch_error: str | None = None
        self._exports = Exports(exports_dir)
        self._files: dict[str, bytes] = {}  # the work in progress, as `write` left it
        self._commits: list[tuple[Revision, MemoryTree]] = []

    # --- making commits -----------------------------------------------------------

    def write(self, path: str, text: str | bytes) -> None:
        self._files[path] = text.encode() if isinstance(text, str) else text

    def remove(self, path: str) -> None:
        del self._files[path]

    def commit(self, summary: str = "change") -> str:
        """Commit the files as written so far, with `summary` as its message; returns the new commit's sha."""
        tree = MemoryTree(dict(self._files))
        tree_sha = tree.hash("") or ""
        parent = self._commits[-1][0].sha if self._commits else ""
        sha = hashlib.sha1(f"{parent} {tree_sha} {summary}".encode()).hexdigest()
        now = time.time()
        revision = Revision(sha=sha, tree=tree_sha, branch=self.branch, commit_time=now, author_time=now,
                            author="test", summary=summary.split("\n", 1)[0], prune_all=says_prune_all(summary))
        self._commits.append((revision, tree))
        return sha

    def head(self) -> str:
        return self._commits[-1][0].sha

    # --- Source ---------------------------------------------------------------------

    def newest(self) -> Revision:
        if self.fetch_error is not None:
            raise SourceError(f"fetch {self.location} {self.branch}: {self.fetch_error}")
        if not self._commits:
            raise SourceError(f"{self.location}: branch {self.branch!r} not found (no commits)")
        return self._commits[-1][0]

    def revision(self, sha: str) -> Revision:
        return next(known for known, _ in self._commits if known.sha == sha)

    def tree(self, revision: Revision) -> MemoryTree:
        return next(tree for known, tree in self._commits if known.sha == revision.sha)

    def export(self, revision: Revision) -> Path:
        tree = self.tree(revision)
        return self._exports.ensure(revision.tree, lambda scratch: _write_tree(tree, scratch))

    def prune_exports(self, in_use: Iterable[str | Path | None]) -> list[str]:
        return self._exports.prune(in_use)


def _write_tree(tree: MemoryTree, into: Path) -> None:
    for path in tree.files(""):
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(tree.read(path))
