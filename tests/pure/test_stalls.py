"""The stall rule (`proxy.pool.stalls`): two calls timed out with nothing answered since the first was sent."""

from __future__ import annotations

from proxy.pool.stalls import STRIKES, ReplicaProgress


def test_two_timed_out_calls_with_nothing_answered_make_a_stall() -> None:
    progress = ReplicaProgress("r1")
    progress.on_sent("a", 0.0)
    progress.on_sent("b", 0.5)
    assert progress.timed_out("a", 5.0) is None  # one slow call is one strike
    progress.on_ended("a")
    stall = progress.timed_out("b", 5.5)
    assert stall is not None and progress.stall is stall
    assert (stall.replica_id, stall.timed_out, stall.outstanding, stall.sent, stall.answered) == ("r1", 2, 1, 2, 0)
    assert stall.silent_s == 5.5
    assert "2 calls ran out their timeout" in stall.message() and "nothing for 5.5s" in stall.message()
    assert STRIKES == 2


def test_an_answer_meanwhile_means_slow_not_stalled() -> None:
    progress = ReplicaProgress("r1")
    progress.on_sent("slow", 0.0)
    progress.on_sent("quick", 1.0)
    progress.on_answered("quick", 1.1)
    assert progress.timed_out("slow", 5.0) is None  # answered after it was sent
    progress.on_ended("slow")
    progress.on_sent("c", 6.0)
    assert progress.timed_out("c", 11.0) is None  # first strike since the answer
    progress.on_ended("c")
    progress.on_sent("d", 11.0)
    progress.on_answered("d", 12.0)  # an answer resets the strikes
    progress.on_sent("e", 13.0)
    assert progress.timed_out("e", 18.0) is None
    assert progress.stall is None


def test_a_replica_is_stalled_once_and_unknown_calls_are_ignored() -> None:
    progress = ReplicaProgress("r1", strikes=1)
    assert progress.timed_out("never-sent", 1.0) is None
    progress.on_sent("a", 0.0)
    progress.on_sent("b", 0.0)
    assert progress.timed_out("a", 5.0) is not None
    assert progress.timed_out("b", 5.0) is None  # already stalled: reported once


def test_outstanding_calls_oldest_first() -> None:
    progress = ReplicaProgress("r1")
    progress.on_sent("late", 2.0)
    progress.on_sent("early", 1.0)
    assert progress.calls() == ["early", "late"] and progress.oldest_sent_at() == 1.0
    progress.on_answered("early", 3.0)
    progress.on_ended("late")
    assert progress.outstanding() == 0 and progress.oldest_sent_at() is None
    assert (progress.sent, progress.answered, progress.last_answer_at) == (2, 1, 3.0)
