"""`gitops run --ray-address` turns Ray's version-mismatch refusal into one user error."""

from __future__ import annotations

from typing import Callable

import pytest

from gitops.commands.run import join_ray
from gitops.errors import UserError
from tests.support.rayversions import RAY_ERROR


def refuse(message: str) -> Callable[[], None]:
    def start() -> None:
        raise RuntimeError(message)

    return start


def test_a_version_mismatch_is_a_user_error_naming_the_address() -> None:
    with pytest.raises(UserError, match=r"^--ray-address head:6379: the cluster runs Ray 2\.52\.0 on Python 3\.11\.9"):
        join_ray(refuse(RAY_ERROR), "head:6379")


def test_other_ray_errors_pass_through() -> None:
    with pytest.raises(RuntimeError, match="no Ray here"):
        join_ray(refuse("no Ray here"), "head:6379")
