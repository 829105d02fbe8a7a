"""User code for the example backends: plain Python, no Ray, no downloads.

Each handler receives a `starlette.requests.Request` and returns a JSON value,
a `str`, `bytes` or a Starlette `Response` (docs/guides/specs.md).
"""
