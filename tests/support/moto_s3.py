"""Moto's S3 server on a loopback port of its own, for component tests (no Ray).

`loopback_s3(monkeypatch, bucket)` starts it on a free port, empties moto's
store (it keeps buckets per process, across servers), sets the node's `AWS_*`
variables through `monkeypatch` (what a proxy or a `gitops` command reads),
makes `bucket` and yields a boto3 client of it. The real tier's server, whose
address Ray's workers inherit for the whole session, is `tests.support.s3`.
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["loopback_s3"]


@contextlib.contextmanager
def loopback_s3(monkeypatch: pytest.MonkeyPatch, bucket: str) -> Iterator[Any]:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"), timeout=10)
        env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1",
               "AWS_ENDPOINT_URL": endpoint}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="k", aws_secret_access_key="s")
        client.create_bucket(Bucket=bucket)
        yield client
    finally:
        server.stop()
