"""Measurement: what one frame costs to encode and to decode, in the proxy and the replica alike (issue 35).

A noop request's frame (a `WireRequest` without a body) and its reply, and a
1 MiB BODY piece, each encoded with `datalink.frames.encode` (or
`encode_piece`) and fed whole to a `FrameDecoder`, as a read of whole frames
arrives: microseconds per frame, best of `--repeats`. Runs alone, not in
`bench.report`: it backs the cost claims in `datalink.frames`.

    python -m bench.frame_codec [--tiny] [--json PATH] [--count 100000] [--repeats 5]
"""

from __future__ import annotations

import sys
import timeit
from typing import Callable

from bench import machine, results
from datalink.frames import BODY_PIECE_BYTES, FrameDecoder, Kind, encode, encode_piece

REQUEST = ("GET", "/", b"", [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"wrk")], b"")
REPLY = (200, [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"2")], b"ok")


def per_call_us(work: Callable[[], object], count: int, repeats: int) -> float:
    return min(timeit.repeat(work, number=count, repeat=repeats)) / count * 1e6


def measure(count: int, repeats: int) -> dict[str, float]:
    decoder = FrameDecoder()
    request, reply = encode(Kind.REQUEST, 7, REQUEST), encode(Kind.RESULT, 7, REPLY)
    piece = b"p" * BODY_PIECE_BYTES
    framed_piece = encode_piece(7, piece)
    large = max(1, count // 1000)
    return {
        "encode_request_us": per_call_us(lambda: encode(Kind.REQUEST, 7, REQUEST), count, repeats),
        "decode_request_us": per_call_us(lambda: decoder.feed(request), count, repeats),
        "encode_reply_us": per_call_us(lambda: encode(Kind.RESULT, 7, REPLY), count, repeats),
        "decode_reply_us": per_call_us(lambda: decoder.feed(reply), count, repeats),
        "encode_body_piece_us": per_call_us(lambda: encode_piece(7, piece), large, repeats),
        "decode_body_piece_us": per_call_us(lambda: decoder.feed(framed_piece), large, repeats),
    }


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.tiny:
        args.count, args.repeats = 1_000, 1
    got = measure(args.count, args.repeats)
    load = machine.describe()["load_average_1m"]
    for name, value in got.items():
        print(f"{name:<24}{value:>10.2f}")
    print(f"load average {load}")
    results.write(args.json, "frame_codec", args.tiny, {**got, "load_average": load})
    return 0


if __name__ == "__main__":
    sys.exit(main())
