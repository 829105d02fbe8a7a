"""Caches owned or refused (issue 50, rows 6, 7 and 8).

Row 6: the model cache another local user made first (or a link to one) is
refused with an error naming it, never used; one of ours open to others is
narrowed to 0700; an entry swapped for a link after it was verified is not
handed to user code. Row 7: a source whose bytes never match the pin is
downloaded once, then waits a back-off (not once per replica restart); a
download larger than the cap stops at the cap; a partial download its
process left behind is swept. Row 8: however many of the temp dir's
`ray-gitops-N` names are taken, a proxy worker still gets a private base.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from datalink.private_dirs import FALLBACKS, private_base
from replica.fetching.sources import fetch
from replica.models import BACKOFF_S, ModelCache, ModelError, backoff_s

ROOT = Path(__file__).resolve().parents[2]
SQUATTER = 65534


def _file(tmp_path: Path, data: bytes) -> tuple[str, str]:
    source = tmp_path / "weights.bin"
    source.write_bytes(data)
    return source.as_uri(), hashlib.sha256(data).hexdigest()


def _counting(calls: list[str]) -> Callable[[str, Path, float, Callable[[int], None]], None]:
    def fetcher(source: str, dest: Path, deadline: float, progress: Callable[[int], None]) -> None:
        calls.append(source)
        fetch(source, dest, deadline, progress)

    return fetcher


@pytest.mark.skipif(os.getuid() != 0, reason="making a directory as another user needs root")
def test_row6_a_model_cache_another_user_made_first_is_refused_with_its_name(tmp_path: Path) -> None:
    squatted = tmp_path / "ray-gitops-models"
    squatted.mkdir(mode=0o777)
    squatted.chmod(0o777)
    os.chown(squatted, SQUATTER, SQUATTER)
    with pytest.raises(ModelError, match=r"belongs to uid 65534.*refused.*--model-cache-dir"):
        ModelCache(squatted)
    assert list(squatted.iterdir()) == []  # nothing of ours went in


def test_row6_a_linked_cache_is_refused_and_ours_open_to_others_is_narrowed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked").symlink_to(elsewhere)
    with pytest.raises(ModelError, match=r"linked is a link or not a directory"):
        ModelCache(tmp_path / "linked")
    open_cache = tmp_path / "open"
    open_cache.mkdir()
    open_cache.chmod(0o777)
    ModelCache(open_cache)
    for path in (open_cache, *(open_cache / name for name in ("entries", "tmp", "locks", "use", "failed"))):
        info = path.lstat()
        assert (info.st_mode & 0o777, info.st_uid) == (0o700, os.getuid()), path


def test_row6_an_entry_swapped_for_a_link_after_verification_is_fetched_again(tmp_path: Path) -> None:
    source, digest = _file(tmp_path, b"w" * 5000)
    calls: list[str] = []
    first = ModelCache(tmp_path / "cache", fetcher=_counting(calls)).stage("m", source, digest, time.monotonic() + 30)
    # The swap: the entry's file replaced by a link to bytes of the same digest elsewhere (one that could change).
    planted = tmp_path / "planted.bin"
    planted.write_bytes(b"w" * 5000)
    first.path.parent.chmod(0o700)
    first.path.unlink()
    first.path.symlink_to(planted)
    again = ModelCache(tmp_path / "cache", fetcher=_counting(calls)).stage("m", source, digest, time.monotonic() + 30)
    assert len(calls) == 2 and again.fetched_bytes == 5000
    assert not again.path.is_symlink() and again.path.read_bytes() == b"w" * 5000


def test_row7_a_wrong_digest_is_downloaded_once_then_waits_a_back_off(tmp_path: Path) -> None:
    source, _ = _file(tmp_path, b"x" * 20_000)
    wrong = "0" * 64
    calls: list[str] = []
    for attempt in range(5):  # five replica restarts in a row
        with pytest.raises(ModelError) as raised:
            ModelCache(tmp_path / "cache", fetcher=_counting(calls)).stage("m", source, wrong, time.monotonic() + 30)
        if attempt:
            assert "not downloaded again for" in str(raised.value) and "back-off" in str(raised.value)
            assert f"but git pins {wrong} (1 download(s) so far" in str(raised.value)  # still says why
    assert len(calls) == 1
    assert backoff_s(1) == BACKOFF_S and backoff_s(2) == 2 * BACKOFF_S and backoff_s(50) == 3600.0
    # Once the back-off has passed, one more download (and the back-off doubles).
    record = tmp_path / "cache" / "failed" / wrong
    past = time.time() - BACKOFF_S - 1
    assert '"count": 1' in record.read_text()
    record.write_text(f'{{"count": 1, "at": {past}}}')
    with pytest.raises(ModelError, match="git pins"):
        ModelCache(tmp_path / "cache", fetcher=_counting(calls)).stage("m", source, wrong, time.monotonic() + 30)
    assert len(calls) == 2
    with pytest.raises(ModelError, match=r"2 download\(s\) so far.*back-off"):
        ModelCache(tmp_path / "cache", fetcher=_counting(calls)).stage("m", source, wrong, time.monotonic() + 30)
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []


def test_row7_a_download_past_the_cap_stops_at_the_cap(tmp_path: Path) -> None:
    data = b"y" * 600_000
    source, digest = _file(tmp_path, data)
    written: list[int] = []

    def streaming(source: str, dest: Path, deadline: float, progress: Callable[[int], None]) -> None:
        # A server that does not say the size up front: the bytes come in chunks.
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("wb") as out:
            for start in range(0, len(data), 50_000):
                out.write(data[start : start + 50_000])
                written.append(out.tell())
                progress(50_000)

    with pytest.raises(ModelError, match=r"cap of 100000 bytes"):
        ModelCache(tmp_path / "cache", max_bytes=100_000, fetcher=streaming).stage(
            "m", source, digest, time.monotonic() + 30
        )
    assert max(written) <= 150_000  # stopped one chunk past the cap, not 600 KB
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []
    # A size known before the download (a file, a HEAD): nothing is written at all.
    with pytest.raises(ModelError, match=r"600000 bytes, more than the cache's cap"):
        ModelCache(tmp_path / "other", max_bytes=100_000).stage("m", source, digest, time.monotonic() + 30)
    assert list((tmp_path / "other" / "tmp").iterdir()) == []


def test_row7_a_partial_download_left_by_a_dead_process_is_swept(tmp_path: Path) -> None:
    ModelCache(tmp_path / "cache")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    partial = tmp_path / "cache" / "tmp" / f"{'a' * 64}.{dead_pid}.0123abcd"
    partial.mkdir()
    (partial / "weights.bin").write_bytes(b"z" * 10_000)
    live = tmp_path / "cache" / "tmp" / f"{'b' * 64}.{os.getpid()}.0123abcd"
    live.mkdir()
    ModelCache(tmp_path / "cache")
    assert not partial.exists()
    assert live.exists()  # a download still running is left alone


def test_row8_every_temp_dir_name_taken_still_gives_a_private_base(tmp_path: Path) -> None:
    uid = os.getuid()
    temp = tmp_path / "tmp"
    temp.mkdir()
    first = temp / f"ray-gitops-{uid}"
    for path in (first, *(Path(f"{first}-{n}") for n in range(1, FALLBACKS + 1))):
        path.mkdir()
        path.chmod(0o755)  # open to others: never taken (as one another user made would not be)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    base = private_base(environ={"HOME": str(home)}, temp_dir=str(temp))
    try:
        assert base.path == str(home / ".cache" / "ray-gitops")
        info = os.fstat(base.fd)
        assert (info.st_mode & 0o777, info.st_uid) == (0o700, uid)
    finally:
        os.close(base.fd)
    # A home others may write is no refuge: then none is found, and the error names every candidate.
    home.chmod(0o777)
    (home / ".cache" / "ray-gitops").rmdir()
    with pytest.raises(PermissionError, match=r"ray-gitops-\d+-15"):
        private_base(environ={"HOME": str(home)}, temp_dir=str(temp))
