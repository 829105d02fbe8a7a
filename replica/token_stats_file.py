"""The node's LLM token counts file: a replica adds what its OpenAI backend measured.

`add_token_counts(cache_dir, backend, models)` adds one replica's counts
since it last added (per model: `vocabulary.replicas.token_counts`) to
`token_stats.json` in the node's model cache directory, under an exclusive
lock (`locks/token_stats.json`) shared with every replica of the node, and
replaces the file by a rename, so a reader (the node's proxies at a scrape:
`proxy.observability.token_metrics`) never sees half of one. The directory
is made private (0700, this user's) when missing, as the model cache's
(`datalink.private_dirs.own_dir`): a backend without models has none yet.
The counts outlive the replicas and the agent, as the cache's `stats.json`
does: Prometheus counters, they only grow. An I/O shell.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from datalink.private_dirs import own_dir
from vocabulary.replicas.token_counts import TOKEN_STATS_FILE, ModelTokens, NodeTokenCounts

__all__ = ["add_token_counts"]


def add_token_counts(cache_dir: str, backend: str, models: dict[str, ModelTokens]) -> None:
    """Add `models`' counts to `backend`'s in the node's file (raises OSError when it cannot be written)."""
    os.close(own_dir(cache_dir))
    os.close(own_dir(os.path.join(cache_dir, "locks")))
    root = Path(cache_dir)
    with open(root / "locks" / TOKEN_STATS_FILE, "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # dropped when the file closes, or the process dies
        path = root / TOKEN_STATS_FILE
        counts = NodeTokenCounts.from_json(path.read_text() if path.exists() else "")
        counts.add(backend, models)
        temp = path.with_suffix(f".{os.getpid()}.tmp")
        temp.write_text(counts.to_json())
        os.replace(temp, path)
