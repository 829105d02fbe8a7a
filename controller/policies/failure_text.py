"""A replica's failure as one line a user can act on. Pure.

`failure_line(type_name, message, traceback_text)` is the exception's type
and message, then where in the user's own code it was raised: the
traceback's innermost frame outside Python, its installed packages (Ray)
and ray-gitops itself, as `file:line`, relative to the replica's working
dir (`deployments/hello.py:12`). A `ModuleNotFoundError` raised from the
user's code (an `import` of a package the cluster lacks) names the fix:
the backend's `runtime_env.pip`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

__all__ = ["user_frame", "failure_line"]

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)', re.MULTILINE)
# Ray's upload of a working_dir: the part of a path after it is the repository's.
_WORKING_DIR = re.compile(r"^.*/_ray_pkg_[0-9a-fA-F]+/")
_OWN_PACKAGES = ("controller", "proxy", "replica", "vocabulary", "gitops", "httpedge", "ray_gitops")
_OWN_ROOT = str(Path(__file__).resolve().parents[1])
_NOT_USER = tuple(
    {sys.prefix, sys.base_prefix, sys.exec_prefix}
) + tuple(f"{_OWN_ROOT}/{name}/" for name in _OWN_PACKAGES)
_MISSING_MODULE = re.compile(r"No module named '(?P<name>[^']+)'")


def _is_user(file: str) -> bool:
    if file.startswith("<") or "/site-packages/" in file or "/dist-packages/" in file:
        return False
    return not file.startswith(_NOT_USER)


def user_frame(traceback_text: str) -> str | None:
    """`file:line` of the innermost user frame of a formatted traceback, or None."""
    frames = [(m["file"], m["line"]) for m in _FRAME.finditer(traceback_text) if _is_user(m["file"])]
    if not frames:
        return None
    file, line = frames[-1]
    return f"{_WORKING_DIR.sub('', file)}:{line}"


def failure_line(type_name: str, message: str, traceback_text: str = "") -> str:
    """"RuntimeError: model file not found (deployments/hello.py:12)", with the fix when one is known."""
    text = f"{type_name}: {message}" if message else type_name
    where = user_frame(traceback_text)
    if where is not None:
        text += f" ({where})"
    missing = _MISSING_MODULE.search(message)
    if type_name == "ModuleNotFoundError" and missing is not None and where is not None:
        top = missing["name"].split(".")[0]
        text += f"; if '{top}' is a package, the cluster lacks it: add it to the backend's runtime_env.pip"
    return text
