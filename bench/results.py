"""The result every measurement module hands the runner, and its command line.

Owns: the common arguments (`--tiny`, `--json PATH`) and the JSON a
measurement writes: its name, the exact command that produced it, the
machine, whether it ran at the tiny size, and its figures. The runner
(`bench.report`) reads these files; nothing here measures or renders.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from bench import machine


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with the two arguments every measurement takes."""
    made = argparse.ArgumentParser(description=description)
    made.add_argument("--tiny", action="store_true", help="the smoke-test size: seconds, not minutes")
    made.add_argument("--json", type=Path, help="write the figures here as JSON")
    return made


def command() -> str:
    """How this process was started, as one can paste it into a shell."""
    module = sys.modules["__main__"].__spec__
    head = ["python", "-m", module.name] if module is not None else ["python", sys.argv[0]]
    return shlex.join([*head, *sys.argv[1:]])


def write(path: Path | None, name: str, tiny: bool, figures: dict[str, Any]) -> None:
    """Write one measurement's figures with its provenance (no-op without a path)."""
    if path is None:
        return
    document = {
        "name": name,
        "command": command(),
        "tiny": tiny,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine.describe(),
        "figures": figures,
    }
    path.write_text(json.dumps(_finite(document), indent=1, sort_keys=False))


def _finite(value: Any) -> Any:
    """JSON has no NaN: an unmeasured figure becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
