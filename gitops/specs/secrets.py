"""What the spec pipeline checks of a `[secrets.NAME]` file without a key.

Owns the age file shape (`age_file_problem`: a binary age file starts with
its version line, an ASCII-armored one with its PEM line; anything else,
such as a plaintext value committed by mistake, is refused) and the size a
secret file may have. Decrypting is the agent's (`gitops.loop.secrets`), never
the loader's: `gitops validate` in CI has no identity. Pure.
"""

from __future__ import annotations

__all__ = ["AGE_HEADER", "AGE_ARMOR_HEADER", "MAX_SECRET_FILE_BYTES", "age_file_problem"]

AGE_HEADER = b"age-encryption.org/v1\n"
AGE_ARMOR_HEADER = b"-----BEGIN AGE ENCRYPTED FILE-----"
MAX_SECRET_FILE_BYTES = 1024 * 1024


def age_file_problem(size: int, head: bytes) -> str | None:
    """Why a file of `size` bytes starting with `head` is not an age file, or None.

    Never quotes the content: a file that is not encrypted may be a value in
    plain text."""
    if size > MAX_SECRET_FILE_BYTES:
        return f"is {size} bytes; a secret file may have at most {MAX_SECRET_FILE_BYTES // 1024} KiB"
    if head.startswith(AGE_HEADER) or head.lstrip().startswith(AGE_ARMOR_HEADER):
        return None
    return (
        "is not an age-encrypted file (neither binary age nor ASCII-armored); "
        "encrypt it with `gitops secret encrypt` and commit only the result"
    )
