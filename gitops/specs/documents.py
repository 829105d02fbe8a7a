"""TOML spec files -> declared backends and endpoints, with every error that
needs no code: syntax, table contents, names, and the rules across files
(duplicate names, and the serving rules of `vocabulary.spec.serving_rules`:
routes, traffic sums, references, zero-replica targets, the names a
backend `uses`).

Hostile input is bounded here (`gitops.specs.limits`): the nesting guard of
`gitops.specs.locating` runs before `tomllib`, and the parsed values are
checked for their size and for numbers that are not finite before any table
is validated; a file that breaks a limit is reported and not read further.

`parse_file` checks one file on its own, a function of its path and bytes
(so a loader keeps it by blob hash); `combine` joins the files and applies
the rules across them. Error locations are scanned only for a file with an
error (`gitops.specs.locating.locate_later`).

Pure: it takes file contents, not a tree, and never raises on bad input.
Import paths and code paths are checked later, against the tree, by
`gitops.specs.loading`.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from vocabulary.spec.serving_rules import (
    ServingProblem,
    taken_grpc_services,
    taken_routes,
    unknown_backends,
    circular_uses,
    unknown_callees,
    unknown_match_backends,
    weight_sum,
    zero_replica_traffic,
)
from gitops.printable import printable
from gitops.specs.limits import SpecLimits, size_text
from gitops.specs.locating import LazyLocations, Locations, locate_later
from gitops.specs.models import (
    NAME_PATTERN,
    EndpointSpec,
    Loc,
    check_backend,
    check_endpoint,
    check_model,
    check_secret,
    did_you_mean,
    dotted,
)

__all__ = ["SpecError", "Declared", "Documents", "ParsedFile", "parse_file", "combine", "oversized_file"]

_SECTIONS = ("backends", "endpoints", "secrets", "models")
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
        """One printable line: names and values from a file may hold control characters."""
        return printable(f"{self.file}:{self.line}:{self.col}: {self.message}")

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.file, self.line, self.col, self.message)


@dataclass(frozen=True)
class Declared:
    """A backend or endpoint table as written; `spec` is None if it is invalid."""

    name: str
    file: str
    locations: Locations | LazyLocations
    spec: Any = None
    raw: Any = None

    def error(self, loc: Loc, message: str, at_value: bool = False) -> SpecError:
        """`message` at the key `loc`, or (`at_value`) at the value written there."""
        line, col = self.locations.find_value(loc) if at_value else self.locations.find(loc)
        return SpecError(self.file, line, col, message)

    def where(self, loc: Loc) -> str:
        line, col = self.locations.find(loc)
        return f"{self.file}:{line}:{col}"


@dataclass(frozen=True)
class Documents:
    backends: dict[str, Declared] = field(default_factory=dict)
    endpoints: dict[str, Declared] = field(default_factory=dict)
    errors: tuple[SpecError, ...] = ()
    secrets: dict[str, Declared] = field(default_factory=dict)
    models: dict[str, Declared] = field(default_factory=dict)


@dataclass(frozen=True)
class ParsedFile:
    """One spec file parsed, its tables checked on their own: a function of
    the file's path and bytes alone, so a loader may keep it by blob hash."""

    tables: tuple[tuple[str, Declared], ...] = ()
    errors: tuple[SpecError, ...] = ()


def parse_file(path: str, data: bytes, limits: SpecLimits = SpecLimits()) -> ParsedFile:
    """One file's syntax, limits and tables; the rules across files come in `combine`."""
    document, locations, problems = _parse(path, data, limits)
    if problems:
        return ParsedFile(errors=tuple(problems))
    errors: list[SpecError] = []
    tables = _tables(path, document, locations, errors, limits)
    return ParsedFile(tuple(tables), tuple(errors))


def combine(
    files: Mapping[str, ParsedFile], errors: tuple[SpecError, ...] = (), limits: SpecLimits = SpecLimits()
) -> Documents:
    """The parsed files (in path order) as one set of documents, with the rules across files
    (not checked for a tree that declares more backends or endpoints than `limits` allow)."""
    tables: dict[str, dict[str, Declared]] = {section: {} for section in _SECTIONS}
    found: list[SpecError] = list(errors)
    for path in sorted(files):
        found.extend(files[path].errors)
        for section, declared in files[path].tables:
            _declare(tables[section], section, declared, found)
    backends, endpoints, secrets = tables["backends"], tables["endpoints"], tables["secrets"]
    too_many = _too_many(tables, limits)
    if too_many:
        return Documents(backends, endpoints, tuple(found + too_many), secrets)
    found.extend(_cross_file_errors(backends, endpoints))
    found.extend(_undeclared(backends, secrets, "secrets"))
    found.extend(_undeclared(backends, tables["models"], "models"))
    found.extend(_undeclared_tokens(tables["models"], secrets))
    return Documents(backends, endpoints, tuple(found), secrets, tables["models"])


def _parse(
    path: str, data: bytes, limits: SpecLimits
) -> tuple[dict[str, Any], Locations | LazyLocations, list[SpecError]]:
    if len(data) > limits.max_file_bytes:
        return {}, Locations(), [oversized_file(path, len(data), limits)]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        return {}, Locations(), [SpecError(path, line, 1, "file is not valid UTF-8")]
    too_deep = _too_deep(limits)
    locations = locate_later(text, limits.max_depth)  # the nesting guard, before tomllib
    if isinstance(locations, Locations) and locations.too_deep is not None:
        return {}, locations, [SpecError(path, *locations.too_deep, too_deep)]
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return {}, locations, [_syntax_error(path, text, str(error))]
    except RecursionError:
        return {}, locations, [SpecError(path, 1, 1, too_deep)]
    problems = [SpecError(path, *locations.find(loc), message) for loc, message in _value_problems(document, limits)]
    return document, locations, problems


def oversized_file(path: str, size: int, limits: SpecLimits) -> SpecError:
    return SpecError(path, 1, 1, f"file is {size} bytes; a spec file may have at most {size_text(limits.max_file_bytes)}")


def _too_deep(limits: SpecLimits) -> str:
    return f"values nest more than {limits.max_depth} levels deep"


def _value_problems(document: dict[str, Any], limits: SpecLimits) -> list[tuple[Loc, str]]:
    """Values nested too deep, strings (keys too) too long, numbers not finite.

    Iterative, so no value can exhaust the stack; the nesting guard before
    `tomllib` has already bounded the depth, which is checked again here on
    the parsed structure."""
    problems: list[tuple[Loc, str]] = []
    pending: list[tuple[Loc, Any]] = [((), document)]
    while pending:
        at, value = pending.pop()
        if len(at) > limits.max_depth:
            problems.append((at, _too_deep(limits)))
        elif isinstance(value, dict):
            for key, child in value.items():
                if _utf8_size(key) > limits.max_string_bytes:
                    problems.append((at, f"{dotted(at)}: a key is {_utf8_size(key)} bytes; {_string_limit(limits)}"))
                else:
                    pending.append(((*at, key), child))
        elif isinstance(value, list):
            pending.extend(((*at, index), child) for index, child in enumerate(value))
        elif isinstance(value, str) and _utf8_size(value) > limits.max_string_bytes:
            problems.append((at, f"{dotted(at)}: string is {_utf8_size(value)} bytes; {_string_limit(limits)}"))
        elif isinstance(value, float) and not math.isfinite(value):
            problems.append((at, f"{dotted(at)}: must be a finite number (got {value})"))
    return sorted(problems, key=lambda problem: [str(part) for part in problem[0]])


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _string_limit(limits: SpecLimits) -> str:
    return f"a string may have at most {size_text(limits.max_string_bytes)}"


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
    path: str,
    document: dict[str, Any],
    locations: Locations | LazyLocations,
    errors: list[SpecError],
    limits: SpecLimits,
) -> list[tuple[str, Declared]]:
    """Each backend and endpoint table in a file, checked on its own."""
    found: list[tuple[str, Declared]] = []
    for key, value in document.items():
        if key not in _SECTIONS:
            expected = "expected [backends.NAME], [endpoints.NAME], [secrets.NAME] or [models.NAME]"
            hint = did_you_mean(key, _SECTIONS)
            errors.append(SpecError(path, *locations.find((key,)), f"unknown table '{key}' ({expected}){hint}"))
        elif not isinstance(value, dict):
            errors.append(SpecError(path, *locations.find((key,)), f"'{key}' must be a table of named {key}"))
        else:
            for name, raw in value.items():
                found.append((key, _check_table(path, key, name, raw, locations, errors, limits)))
    return found


def _check_table(
    path: str,
    section: str,
    name: str,
    raw: Any,
    locations: Locations | LazyLocations,
    errors: list[SpecError],
    limits: SpecLimits,
) -> Declared:
    declared = Declared(name, path, locations, raw=raw)
    if NAME_PATTERN.fullmatch(name) is None:
        errors.append(
            declared.error((section, name), f"{section}.{name}: name must match {NAME_PATTERN.pattern}")
        )
    if section == "backends":
        spec, problems = check_backend(raw, (section, name), limits.max_replicas)
    elif section == "secrets":
        spec, problems = check_secret(raw, (section, name))
    elif section == "models":
        spec, problems = check_model(raw, (section, name))
    else:
        spec, problems = check_endpoint(raw, (section, name))
    errors.extend(declared.error(problem.loc, problem.message, problem.at_value) for problem in problems)
    return replace(declared, spec=spec)


def _too_many(tables: dict[str, dict[str, Declared]], limits: SpecLimits) -> list[SpecError]:
    """One error per section past `limits.max_tables`, at its first table over the limit."""
    errors: list[SpecError] = []
    for section in ("backends", "endpoints"):
        declared = list(tables[section].values())
        if len(declared) > limits.max_tables:
            first = declared[limits.max_tables]
            errors.append(first.error((section, first.name), (
                f"{len(declared)} {section} declared; a tree may declare at most {limits.max_tables}")))
    return errors


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
    """The serving rules of `vocabulary.spec.serving_rules`, located in the files."""
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
    for problem in taken_grpc_services(valid):
        owner = endpoints[str(problem.other)]
        first = owner.where(("endpoints", owner.name, "grpc_service"))
        errors.append(endpoints[str(problem.endpoint)].error(problem.path, f"{problem.message} ({first})"))
    for name, declared in backends.items():
        uses = declared.raw.get("uses") if isinstance(declared.raw, dict) else None
        named = [used if isinstance(used, str) else None for used in uses] if isinstance(uses, list) else []
        errors.extend(declared.error(p.path, p.message) for p in unknown_callees(name, named, backends, endpoints))
    errors.extend(backends[str(p.backend)].error(p.path, p.message)
                  for p in circular_uses(_uses(backends), _endpoint_backends(endpoints)))
    return errors


def _uses(backends: dict[str, Declared]) -> dict[str, list[str]]:
    """Each backend's `uses` names, as written (entries that are not names left out)."""
    found: dict[str, list[str]] = {}
    for name, declared in backends.items():
        uses = declared.raw.get("uses") if isinstance(declared.raw, dict) else None
        found[name] = [used for used in uses if isinstance(used, str)] if isinstance(uses, list) else []
    return found


def _endpoint_backends(endpoints: dict[str, Declared]) -> dict[str, set[str]]:
    """The backends each endpoint sends requests to (traffic, shadow), as written."""
    found: dict[str, set[str]] = {}
    for name, declared in endpoints.items():
        raw = declared.raw if isinstance(declared.raw, dict) else {}
        found[name] = {str(b) for key in ("traffic", "shadow") if isinstance(raw.get(key), dict) for b in raw[key]}
    return found


def _undeclared(backends: dict[str, Declared], tables: dict[str, Declared], section: str) -> list[SpecError]:
    """A backend names only secrets (models) declared in some [secrets.NAME] ([models.NAME]) table."""
    errors: list[SpecError] = []
    for name, declared in backends.items():
        named = declared.raw.get(section) if isinstance(declared.raw, dict) else None
        for index, item in enumerate(named if isinstance(named, list) else ()):
            if isinstance(item, str) and item not in tables:
                known = ", ".join(sorted(tables)) or "none is declared"
                errors.append(
                    declared.error(
                        ("backends", name, section, index),
                        f"backends.{name}.{section}[{index}]: no [{section}.{item}] is declared (declared: {known})",
                    )
                )
    return errors


def _undeclared_tokens(models: dict[str, Declared], secrets: dict[str, Declared]) -> list[SpecError]:
    """A model's `token_secret` names a declared [secrets.NAME]."""
    errors: list[SpecError] = []
    for name, declared in models.items():
        item = declared.raw.get("token_secret") if isinstance(declared.raw, dict) else None
        if isinstance(item, str) and item not in secrets:
            known = ", ".join(sorted(secrets)) or "none is declared"
            errors.append(declared.error(
                ("models", name, "token_secret"),
                f"models.{name}.token_secret: no [secrets.{item}] is declared (declared: {known})",
                True,
            ))
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
