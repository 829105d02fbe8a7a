"""`gitops run` against a tmp git repository, plus a loopback load generator.

For the autoscaling real test and benchmark: the agent (`AgentProcess`,
from tests/support/stack.py, re-exported here for the benchmark) runs as a
user starts it, joined to an existing Ray (the test session's), and
everything it started is stopped again. `Load` is a closed-loop client: N workers,
each sending its next request when the previous one answered, recording
each status and latency with the time it was sent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.stack import AgentProcess, agent_namespace
from vocabulary.control.actor_apis import ControllerAPI, Remote
from vocabulary.control.goal_api import CONTROLLER_NAME
from vocabulary.control.status import ClusterStatus

__all__ = ["AgentProcess", "Load", "Answer", "controller_status", "APP_SOURCE"]

APP_SOURCE = (Path(__file__).parent / "autoscale_slow.py").read_text()


def controller_status() -> ClusterStatus:
    import ray

    from controller.client import result

    controller: Remote[ControllerAPI] = Remote(ray.get_actor(CONTROLLER_NAME, namespace=agent_namespace()))
    return result(controller.call(ControllerAPI.get_status), timeout_s=30)


@dataclass(frozen=True)
class Answer:
    sent_at: float  # time.monotonic()
    latency_s: float
    status: int  # 0: no HTTP answer at all


class Load:
    """A closed-loop load of `workers` concurrent clients against one URL."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._answers: list[Answer] = []
        self._lock = threading.Lock()
        self._workers: list[tuple[threading.Thread, threading.Event]] = []

    def set_workers(self, count: int) -> None:
        while len(self._workers) < count:
            stop = threading.Event()
            thread = threading.Thread(target=self._work, args=(stop,), daemon=True)
            thread.start()
            self._workers.append((thread, stop))
        while len(self._workers) > count:
            thread, stop = self._workers.pop()
            stop.set()
            thread.join(15)

    def stop(self) -> None:
        self.set_workers(0)

    def answers(self) -> list[Answer]:
        with self._lock:
            return list(self._answers)

    def _work(self, stop: threading.Event) -> None:
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    status = client.get(self._url).status_code
                except httpx.HTTPError:
                    status = 0
                answer = Answer(sent, time.monotonic() - sent, status)
                with self._lock:
                    self._answers.append(answer)
