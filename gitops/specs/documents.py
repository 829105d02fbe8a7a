"""TOML spec files -> declared backends and endpoints, with every error that
needs no code: syntax, table contents, names, and the rules across files
(duplicate names, and the serving rules of `vocabulary.serving_rules`:
routes, traffic sums, references, zero-replica targets, the names a
backend `uses`).

Pure: it takes file contents, not a tree, and never raises on bad input.
Import paths and code paths are checked later, against the tree, by
`gitops.specs.loading`.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from vocabulary.serving_rules import (
    ServingProblem,
    taken_routes,
    unknown_backends,
    unknown_callees,
    unknown_match_backends,
    weight_sum,
    zero_replica_traffic,
)
from gitops.specs.locating import Locations, locate
from gitops.specs.models import NAME_PATTERN, EndpointSpec, Loc, check_backend, check_endpoint

__all__ = ["SpecError", "Declared", "Documents", "MAX_DEPTH", "parse_documents"]

_SECTIONS = ("backends", "endpoints")
# Configs travel as JSON to the controller and replicas; deeper values are a mistake.
MAX_DEPTH = 32
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_DECLARED_TWICE = re.compile(r"Cannot declare \((.*)\) twice")


@dataclass(frozen=True)
class SpecError:
    """One problem in the specs, located in a file relative to the repo root."""

    file: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: {self.message}"

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.file, self.line, self.col, self.message)


@dataclass(frozen=True)
class Declared:
    """A backend or endpoint table as written; `spec` is None if it is invalid."""

    name: str
    file: str
    locations: Locations
    spec: Any = None
    raw: Any = None

    def error(self, loc: Loc, message: str) -> SpecError:
        line, col = self.locations.find(loc)
        return SpecError(self.file, line, col, message)

    def where(self, loc: Loc) -> str:
        line, col = self.locations.find(loc)
        return f"{self.file}:{line}:{col}"


@dataclass(frozen=True)
class Documents:
    backends: dict[str, Declared] = field(default_factory=dict)
    endpoints: dict[str, Declared] = field(default_factory=dict)
    errors: tuple[SpecError, ...] = ()


def parse_documents(files: Mapping[str, bytes]) -> Documents:
    """Parse and check every spec file; `files` maps repo-relative paths to bytes."""
    backends: dict[str, Declared] = {}
    endpoints: dict[str, Declared] = {}
    errors: list[SpecError] = []
    for path in sorted(files):
        document, locations, error = _parse(path, files[path])
        if error is not None:
            errors.append(error)
            continue
        for section, declared in _tables(path, document, locations, errors):
            _declare(backends if section == "backends" else endpoints, section, declared, errors)
    errors.extend(_cross_file_errors(backends, endpoints))
    return Documents(backends, endpoints, tuple(errors))


def _parse(path: str, data: bytes) -> tuple[dict[str, Any], Locations, SpecError | None]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        return {}, Locations(), SpecError(path, line, 1, "file is not valid UTF-8")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return {}, Locations(), _syntax_error(path, text, str(error))
    except RecursionError:
        return {}, Locations(), SpecError(path, 1, 1, f"values nest more than {MAX_DEPTH} levels deep")
    locations = locate(text)
    too_deep = _too_deep(document, ())
    if too_deep is not None:
        line, col = locations.find(too_deep)
        return {}, locations, SpecError(path, line, col, f"values nest more than {MAX_DEPTH} levels deep")
    return document, locations, None


def _too_deep(value: Any, at: Loc) -> Loc | None:
    """The first key path nested beyond MAX_DEPTH, if any."""
    if len(at) > MAX_DEPTH:
        return at
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        found = _too_deep(child, (*at, key))
        if found is not None:
            return found
    return None


def _syntax_error(path: str, text: str, message: str) -> SpecError:
    """tomllib says "... (at line L, column C)" or "... (at end of document)"."""
    found = _TOML_POSITION.search(message)
    if found:
        line, col = int(found.group(1)), int(found.group(2))
        return SpecError(path, line, col, f"TOML syntax: {_plain(message[: found.start()])}")
    reason = message.removesuffix(" (at end of document)")
    lines = text.split("\n")
    return SpecError(path, len(lines), len(lines[-1]) + 1, f"TOML syntax: {reason} (at end of file)")


def _plain(message: str) -> str:
    """tomllib names a table as a Python tuple; show it as TOML does."""
    found = _DECLARED_TWICE.fullmatch(message)
    if found is None:
        return message
    parts = [part.strip().strip("'\"") for part in found.group(1).split(",") if part.strip()]
    return f"table [{'.'.join(parts)}] is declared twice"


def _tables(
    path: str, document: dict[str, Any], locations: Locations, errors: list[SpecError]
) -> list[tuple[str, Declared]]:
    """Each backend and endpoint table in a file, checked on its own."""
    found: list[tuple[str, Declared]] = []
    for key, value in document.items():
        line, col = locations.find((key,))
        if key not in _SECTIONS:
            expected = "expected [backends.NAME] or [endpoints.NAME]"
            errors.append(SpecError(path, line, col, f"unknown table '{key}' ({expected})"))
        elif not isinstance(value, dict):
            errors.append(SpecError(path, line, col, f"'{key}' must be a table of named {key}"))
        else:
            for name, raw in value.items():
                found.append((key, _check_table(path, key, name, raw, locations, errors)))
    return found


def _check_table(
    path: str, section: str, name: str, raw: Any, locations: Locations, errors: list[SpecError]
) -> Declared:
    declared = Declared(name, path, locations, raw=raw)
    if NAME_PATTERN.fullmatch(name) is None:
        errors.append(
            declared.error((section, name), f"{section}.{name}: name must match {NAME_PATTERN.pattern}")
        )
    check = check_backend if section == "backends" else check_endpoint
    spec, problems = check(raw, (section, name))
    errors.extend(declared.error(problem.loc, problem.message) for problem in problems)
    return replace(declared, spec=spec)


def _declare(
    table: dict[str, Declared], section: str, declared: Declared, errors: list[SpecError]
) -> None:
    earlier = table.get(declared.name)
    if earlier is None:
        table[declared.name] = declared
        return
    kind = section[:-1]
    at = (section, declared.name)
    errors.append(
        declared.error(
            at, f"{kind} '{declared.name}' is defined twice: in {earlier.where(at)} and in {declared.file}"
        )
    )


# --- rules across files ------------------------------------------------------------


def _cross_file_errors(backends: dict[str, Declared], endpoints: dict[str, Declared]) -> list[SpecError]:
    """The serving rules of `vocabulary.serving_rules`, located in the files."""
    scaled = {name: declared.spec for name, declared in backends.items()}
    valid: dict[str, EndpointSpec] = {}
    errors: list[SpecError] = []
    for name, declared in endpoints.items():
        problems = _reference_problems(name, declared, backends)
        spec: EndpointSpec | None = declared.spec
        if spec is not None:
            valid[name] = spec
            problems += weight_sum(name, spec.traffic) + zero_replica_traffic(name, spec.traffic, scaled)
        errors.extend(declared.error(problem.path, problem.message) for problem in problems)
    for problem in taken_routes(valid):
        owner = endpoints[str(problem.other)]
        first = owner.where(("endpoints", owner.name, "route"))
        errors.append(endpoints[str(problem.endpoint)].error(problem.path, f"{problem.message} ({first})"))
    for name, declared in backends.items():
        uses = declared.raw.get("uses") if isinstance(declared.raw, dict) else None
        named = [used if isinstance(used, str) else None for used in uses] if isinstance(uses, list) else []
        errors.extend(declared.error(p.path, p.message) for p in unknown_callees(name, named, backends, endpoints))
    return errors


def _reference_problems(name: str, declared: Declared, backends: dict[str, Declared]) -> list[ServingProblem]:
    """Checked on the raw table, so an endpoint with other errors still gets these."""
    raw = declared.raw if isinstance(declared.raw, dict) else {}
    problems: list[ServingProblem] = []
    for key in ("traffic", "shadow"):
        weights = raw.get(key)
        problems += unknown_backends(name, key, weights if isinstance(weights, dict) else (), backends)
    return problems + unknown_match_backends(name, _matched_backends(raw.get("match")), backends)


def _matched_backends(rules: Any) -> list[str | None]:
    """The backend of each match rule, by position; None for a rule that names none."""
    if not isinstance(rules, list):
        return []
    named = [rule.get("backend") if isinstance(rule, dict) else None for rule in rules]
    return [name if isinstance(name, str) else None for name in named]
