"""Log lines never carry credentials (issue 11 row 2): the handler's redaction filter."""

from __future__ import annotations

import io
import logging

from gitops.process.logs import configure_logging
from gitops.redaction import register_secret


def test_a_logged_url_loses_its_userinfo_in_message_and_fields() -> None:
    out = io.StringIO()
    handler = configure_logging("json", stream=out)
    try:
        logging.getLogger("gitops.test").warning(
            "fetch %s failed", "https://u:hunter2-token@git.example/x.git",
            extra={"repo": "https://u:hunter2-token@git.example/x.git"},
        )
    finally:
        logging.getLogger().removeHandler(handler)
    assert "hunter2-token" not in out.getvalue()
    assert "https://git.example/x.git" in out.getvalue()


def test_a_registered_secret_is_masked_in_an_exception_text() -> None:
    register_secret("exc-secret-40af")
    out = io.StringIO()
    handler = configure_logging("text", stream=out)
    try:
        try:
            raise RuntimeError("bad token exc-secret-40af")
        except RuntimeError:
            logging.getLogger("gitops.test").exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    assert "exc-secret-40af" not in out.getvalue()
    assert "RuntimeError" in out.getvalue()
