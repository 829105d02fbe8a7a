"""Models: fetching into a node's cache (docs/models.md), against an S3-compatible server.

moto's S3 server on 127.0.0.1 holds one model of `--mb` MiB. Measured:

- cold fetch: `replica.models.ModelCache.stage` (obstore's parallel ranged
  reads, then the digest verified) in MB/s, beside boto3's `download_file`
  with its default transfer settings (the ordinary client; no verification);
- cache hit: a second stage (0 bytes fetched, the digest verified again)
  beside reading the file from local disk once;
- 4 processes staging the model at once on one node: the bytes fetched
  (the model's size once) and the slowest one's seconds.

moto serves from Python, so the absolute MB/s are the server's as much as
the client's: read the two clients side by side. Not part of
`bench.report` yet; multiplexing (issue 29's second half) is not built.

    python -m bench.models [--tiny] [--json PATH] [--mb N]
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import results

_KEY = "model/weights.bin"


def _stage(root: str, digest: str, out: str) -> None:
    from replica.models import ModelCache

    staged = ModelCache(Path(root)).stage("bench", f"s3://bench/{_KEY}", digest, time.monotonic() + 600)
    Path(out).write_text(f"{staged.fetched_bytes} {staged.seconds}")


def measure(mb: int) -> dict[str, Any]:
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION="us-east-1")
    import boto3
    from moto.server import ThreadedMotoServer

    from replica.models import ModelCache

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ["AWS_ENDPOINT_URL"] = f"http://{host}:{port}"
    work = Path(tempfile.mkdtemp(prefix="bench-models-"))
    try:
        s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
        s3.create_bucket(Bucket="bench")
        data = os.urandom(mb * 1024 * 1024)
        s3.put_object(Bucket="bench", Key=_KEY, Body=data)
        digest = hashlib.sha256(data).hexdigest()
        size = len(data)
        del data

        started = time.monotonic()
        s3.download_file("bench", _KEY, str(work / "boto3.bin"))
        boto3_s = time.monotonic() - started

        cache = ModelCache(work / "cache")
        cold = cache.stage("bench", f"s3://bench/{_KEY}", digest, time.monotonic() + 600)
        hit = ModelCache(work / "cache").stage("bench", f"s3://bench/{_KEY}", digest, time.monotonic() + 600)
        started = time.monotonic()
        (work / "boto3.bin").read_bytes()
        disk_s = time.monotonic() - started

        context = multiprocessing.get_context("spawn")
        outs = [work / f"stage{i}" for i in range(4)]
        processes = [
            context.Process(target=_stage, args=(str(work / "together"), digest, str(out))) for out in outs
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(600)
        together = [tuple(float(x) for x in out.read_text().split()) for out in outs]
        return {
            "model_mb": size / 1e6,
            "cold_fetch_mb_s": size / 1e6 / cold.seconds,
            "boto3_download_file_mb_s": size / 1e6 / boto3_s,
            "cold_fetched_bytes": cold.fetched_bytes,
            "hit_fetched_bytes": hit.fetched_bytes,
            "hit_stage_s": hit.seconds,
            "local_disk_read_s": disk_s,
            "four_at_once_fetched_bytes": sum(fetched for fetched, _ in together),
            "four_at_once_slowest_s": max(seconds for _, seconds in together),
        }
    finally:
        server.stop()
        for folder, dirs, _files in os.walk(work):
            for name in dirs:
                os.chmod(os.path.join(folder, name), 0o755)
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="the model's size in MiB")
    args = parser.parse_args()
    figures = measure(8 if args.tiny else args.mb)
    for name, value in figures.items():
        print(f"{name:<28} {value:,.2f}")
    results.write(args.json, "models", args.tiny, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
