"""The real tier's S3-compatible store: moto's server on 127.0.0.1, and the node's AWS_* variables.

Ray workers (replicas, proxies) inherit the environment the session's Ray
starts with, which is after collection. Importing this module sets the
standard `AWS_*` variables (throwaway credentials, the loopback endpoint on
`S3_PORT`) once for the whole session, as an operator sets them on each node
(never in git): every module that needs S3 (the models, the capture sink)
imports it, so they all agree on one endpoint whichever is collected first.
`s3_server()` runs the server on that port for as long as a module needs it,
starting from an empty store.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from tests.support.stack import free_port

__all__ = ["S3_PORT", "s3_server"]

S3_PORT = free_port()
os.environ.update(
    AWS_ACCESS_KEY_ID="test-key-id",
    AWS_SECRET_ACCESS_KEY="test-secret",
    AWS_REGION="us-east-1",
    AWS_ENDPOINT_URL=f"http://127.0.0.1:{S3_PORT}",
)


@contextlib.contextmanager
def s3_server(*buckets: str) -> Iterator[Any]:
    """Moto's S3 server on `S3_PORT` with `buckets` made; yields a boto3 S3 client of it."""
    import boto3
    import httpx
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=S3_PORT, verbose=False)
    server.start()
    try:
        # Moto keeps its buckets in the process, not in the server: without a reset a module
        # would find the objects an earlier module of this worker left under the same keys.
        httpx.post(f"{os.environ['AWS_ENDPOINT_URL']}/moto-api/reset", timeout=10).raise_for_status()
        client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield client
    finally:
        server.stop()
