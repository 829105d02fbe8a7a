"""Ray's raw C++ log lines are told apart from everything else on stderr."""

from __future__ import annotations

from gitops.process.quieting import is_ray_line


def test_a_ray_core_log_line_is_recognised() -> None:
    line = (b"[2026-11-23 17:51:55,636 E 19993 20056] task_manager.cc:1545: "
            b"Failed to push error to driver for task 3d3e27c54ed1f5cf\n")
    assert is_ray_line(line)


def test_the_agents_own_lines_and_tracebacks_pass() -> None:
    assert not is_ray_line(b"17:51:51 1bc1d97 applied in 6.29s\n")
    assert not is_ray_line(b'  File "x.py", line 3, in <module>\n')
