"""A rollout as the fake controller reports it, for the agent tests.

Moved out of tests/component/test_agent_rollouts.py, whose tests use them too."""

from __future__ import annotations

from tests.support.agent_loop import make_agent, spec, spec_repo, tick  # noqa: F401 (spec_repo: fixture)
from vocabulary.control.rollouts import Check, CheckName, Rollout, RolloutPhase
from vocabulary.spec.rollout_config import RolloutConfig

BROKEN = Check(name=CheckName.ERROR_RATIO, backend="v2", measured=0.2, threshold=0.01, passed=False)

def rollout(phase: RolloutPhase) -> Rollout:
    return Rollout(endpoint="echo", before={"v1": 1.0}, target={"v1": 0.5, "v2": 0.5}, config=RolloutConfig(),
                   phase=phase, step_started_at=0.0, checks=(BROKEN,) if phase is RolloutPhase.ABORTED else ())
