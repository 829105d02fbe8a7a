"""A replica's startup failure says where in the user's code it was raised, and the fix for a missing package."""

from __future__ import annotations

import sys

from controller.policies.failure_text import failure_line, user_frame

PKG = "/tmp/ray/session_1/runtime_resources/working_dir_files/_ray_pkg_0a1b2c3d"
TRACEBACK = f'''Traceback (most recent call last):
  File "{sys.prefix}/lib/python3.11/site-packages/ray/_private/function_manager.py", line 740, in actor_method_executor
    return method(__ray_actor, *args, **kwargs)
  File "/opt/ray-gitops/replica/host.py", line 97, in load_callable
    return target(*init_args, **init_kwargs)
  File "{PKG}/deployments/hello.py", line 12, in __init__
    self.model = load(path)
  File "{PKG}/deployments/models.py", line 3, in load
    raise RuntimeError("model file x not found")
  File "{sys.base_prefix}/lib/python3.11/pathlib.py", line 1013, in open
    return io.open(self, mode)
'''


def test_the_innermost_user_frame_is_relative_to_the_working_dir() -> None:
    assert user_frame(TRACEBACK) == "deployments/models.py:3"
    assert user_frame("no frames here") is None
    assert user_frame('  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import\n') is None


def test_a_startup_failure_names_its_frame() -> None:
    assert failure_line("RuntimeError", "model file x not found", TRACEBACK) == (
        "RuntimeError: model file x not found (deployments/models.py:3)"
    )
    assert failure_line("RuntimeError", "boom") == "RuntimeError: boom"


def test_a_package_the_cluster_lacks_names_runtime_env_pip() -> None:
    imported = f'  File "{PKG}/deployments/hello.py", line 3, in <module>\n    import torch\n'
    line = failure_line("ModuleNotFoundError", "No module named 'torch'", imported)
    assert line.startswith("ModuleNotFoundError: No module named 'torch' (deployments/hello.py:3); ")
    assert "runtime_env.pip" in line and "'torch'" in line
    # The backend's own module missing (no user frame imported it): no package to install.
    assert "runtime_env" not in failure_line("ModuleNotFoundError", "No module named 'deployments.hello'", "")
