"""The allow-list of what an embedded Ray's replicas inherit (issue 27 row 16)."""

from __future__ import annotations

import os

from controller.cluster import _only
from vocabulary.replicas.replica_env import check_patterns, inherited

AGENT = {
    "PATH": "/usr/bin", "HOME": "/home/agent", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC",
    "PYTHONPATH": "/app", "VIRTUAL_ENV": "/venv", "RAY_AUTH_MODE": "token",
    "AWS_ACCESS_KEY_ID": "AKIA", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json", "AZURE_CLIENT_ID": "az",
    "HF_TOKEN": "hf", "CUDA_VISIBLE_DEVICES": "0",
    "GITOPS_REPO": "https://u:p@host/x.git", "GITOPS_TOKEN": "admin", "GITOPS_ADMIN_TOKEN_FILE": "/s/t",
    "DATABASE_URL": "postgres://u:p@db/x", "SSH_AUTH_SOCK": "/tmp/agent.sock", "GIT_ASKPASS": "/bin/askpass",
}


def test_row16_the_allow_list_keeps_basics_python_ray_and_cloud_credentials() -> None:
    kept = inherited(AGENT)
    assert set(kept) == {
        "PATH", "HOME", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "RAY_AUTH_MODE",
        "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_CLIENT_ID", "HF_TOKEN", "CUDA_VISIBLE_DEVICES",
    }
    assert kept["AWS_ACCESS_KEY_ID"] == "AKIA"


def test_row16_names_and_prefixes_can_be_added_but_never_gitops() -> None:
    kept = inherited(AGENT, ["DATABASE_URL", "SSH_*", "GITOPS_*", "GITOPS_TOKEN"])
    assert kept["DATABASE_URL"] == AGENT["DATABASE_URL"] and "SSH_AUTH_SOCK" in kept
    assert not [name for name in kept if name.startswith("GITOPS_")]


def test_row16_bad_patterns_are_named() -> None:
    assert check_patterns(["DATABASE_URL", "MY_APP_*", "_X"]) == []
    assert check_patterns(["1ABC"]) == ["'1ABC' is not an environment variable name (or a prefix ending in *)"]
    assert check_patterns(["*"]) == ["'*' is not an environment variable name (or a prefix ending in *)"]
    assert check_patterns(["A-B"]) == ["'A-B' is not an environment variable name (or a prefix ending in *)"]
    assert "GITOPS_" in check_patterns(["GITOPS_TOKEN"])[0]


def test_row16_variables_left_out_come_back_after_ray_starts() -> None:
    os.environ["GITOPS_ROW16_PROBE"] = "secret"
    try:
        with _only(inherited(os.environ)):
            assert "GITOPS_ROW16_PROBE" not in os.environ and "PATH" in os.environ
            os.environ["RAY_SET_MEANWHILE"] = "1"
        assert os.environ["GITOPS_ROW16_PROBE"] == "secret" and os.environ.pop("RAY_SET_MEANWHILE") == "1"
    finally:
        os.environ.pop("GITOPS_ROW16_PROBE", None)
