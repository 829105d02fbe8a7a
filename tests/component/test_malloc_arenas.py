"""The controller's C heap call takes on this glibc machine: freed pages go back to the kernel."""

from __future__ import annotations

import platform

import pytest

from controller.shell import malloc_arenas

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt and malloc_trim")


def test_trim_hands_freed_pages_back_after_a_large_free() -> None:
    blocks = [bytearray(64 * 1024) for _ in range(2000)]  # 128 MB in small-enough blocks to live in the heap
    del blocks
    assert malloc_arenas.trim() is True
