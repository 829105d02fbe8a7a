"""Environments: `environments/NAME.toml` applied on top of the one spec tree.

The spec tree is the same for every environment. An environment file may
set, per backend and endpoint, only the keys whose field is declared
`ENVIRONMENT_OVERRIDABLE` in `vocabulary.spec` (or, inside a table with
keys of its own such as `runtime_env`, in `gitops.specs.models`): one
declaration, one schema. Any other key is an error at its FILE:LINE:COL.

Merging (`overlay`): a table with keys of its own (`autoscaling`,
`rollout`, `ray_actor_options`, `runtime_env`, ...) merges key by key with
the base; any other value, maps included (`traffic`, `shadow`,
`env_vars`, `user_config`), replaces the base's whole; `num_replicas` and
`[autoscaling]`, two ways to say the replica count, replace each other. The merged table
is then checked exactly as a spec file's table is, and the rules across
files run on the merged tables: an error caused by an environment's value
is located in the environment file.

An environment file also holds the environment's agent settings:
`[promotion]` (`gitops.delivery.gates`) and `[[sync_windows]]`
(`gitops.delivery.windows`), returned as `EnvironmentSettings`.

Pure: file contents in, values and `SpecError`s out; never raises on bad input.
"""

from __future__ import annotations

import re
import tomllib
import typing
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.base import ENVIRONMENT_OVERRIDABLE
from vocabulary.spec.endpoints import EndpointConfig
from gitops.delivery.cron import CronError, parse_cron
from gitops.delivery.gates import PromotionSettings, Requirement, RequirementError, parse_requirement
from gitops.specs.documents import Declared, ParsedFile, SpecError
from gitops.specs.limits import SpecLimits
from gitops.specs.locating import LazyLocations, Locations, locate_later
from gitops.specs.models import (
    NAME_PATTERN,
    BackendSpec,
    EndpointSpec,
    Loc,
    check_backend,
    check_endpoint,
    did_you_mean,
    dotted,
    known_keys,
)
from gitops.delivery.windows import SyncWindow, WindowKind

__all__ = [
    "ENVIRONMENTS_PATH",
    "environment_path",
    "overridable_keys",
    "EnvironmentSettings",
    "EnvironmentFile",
    "parse_environment",
    "overlay",
]

ENVIRONMENTS_PATH = "environments"
_SECTIONS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "backends": (BackendConfig, BackendSpec),
    "endpoints": (EndpointConfig, EndpointSpec),
}
_SETTINGS = ("promotion", "sync_windows")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_GITHUB_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_GITLAB_PROJECT = re.compile(r"[0-9]+|[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+")
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def environment_path(name: str) -> str:
    """Where environment `name`'s file is, from the repository root."""
    return f"{ENVIRONMENTS_PATH}/{name}.toml"


def _declared_overridable(info: Any) -> bool:
    extra = info.json_schema_extra
    return isinstance(extra, dict) and all(extra.get(key) == value for key, value in ENVIRONMENT_OVERRIDABLE.items())


def _table_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a key that is a table with keys of its own (`X` or `X | None`)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def overridable_keys(section: str) -> dict[str, frozenset[str] | None]:
    """Key -> the sub-keys an environment may set in it (None: any, or not a table).

    Derived from the declarations: the config field says whether its key may
    be set; a table whose own model declares some keys overridable allows
    only those (`runtime_env.env_vars`, not `runtime_env.pip`)."""
    config, spec = _SECTIONS[section]
    keys: dict[str, frozenset[str] | None] = {}
    for name, info in config.model_fields.items():
        if not _declared_overridable(info):
            continue
        model = _table_model(spec.model_fields[name].annotation)
        marked = (
            frozenset(key for key, sub in model.model_fields.items() if _declared_overridable(sub))
            if model is not None
            else frozenset()
        )
        keys[name] = marked or None
    return keys


def _merging_keys(section: str) -> frozenset[str]:
    """Keys whose value is a table with keys of its own: merged key by key."""
    _, spec = _SECTIONS[section]
    return frozenset(name for name, info in spec.model_fields.items() if _table_model(info.annotation) is not None)


# --- the settings tables --------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


class PromotionSpec(_Strict):
    """`[promotion]`: where a commit that passed this environment's gates goes next."""

    to: str = Field(description="The environment promoted to.")
    branch: str = Field(description="The branch that environment's agent watches (e.g. env/prod).")
    soak_s: float = Field(default=900.0, ge=0, description="Seconds the commit must have served, applied and Synced.")
    require: list[str] = Field(
        default_factory=list,
        description='Gates besides the soak: "rollouts", "no_backend_errors", "shadow_agreement>=RATIO".',
    )
    mode: Literal["push", "pull_request"] = Field(
        default="push", description="push: fast-forward the branch; pull_request: open or update a PR/MR."
    )
    provider: Literal["github", "gitlab"] | None = Field(default=None, description="Where pull requests are opened.")
    repository: str | None = Field(default=None, description="owner/name on GitHub; the project's path or id on GitLab.")
    api_url: str | None = Field(
        default=None, description="The API's base URL; default https://api.github.com or https://gitlab.com/api/v4."
    )

    @field_validator("to")
    @classmethod
    def _environment_name(cls, value: str) -> str:
        if NAME_PATTERN.fullmatch(value) is None:
            raise ValueError(f"must be an environment name ({NAME_PATTERN.pattern})")
        return value

    @field_validator("branch")
    @classmethod
    def _branch_name(cls, value: str) -> str:
        if not value or value.startswith(("-", "/")) or ".." in value or any(c in value for c in " ~^:?*[\\\0\n"):
            raise ValueError(f"'{value}' is not a branch name")
        return value.removeprefix("refs/heads/")

    @field_validator("require")
    @classmethod
    def _requirements(cls, value: list[str]) -> list[str]:
        for text in value:
            try:
                parse_requirement(text)
            except RequirementError as error:
                raise ValueError(str(error)) from None
        return value

    @field_validator("api_url")
    @classmethod
    def _api_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password:
            raise ValueError(f"must be an https:// URL without credentials (got '{value}')")
        if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
            raise ValueError("must be https: the promotion token is sent with every request (http only on loopback)")
        return value

    @model_validator(mode="after")
    def _pull_request_target(self) -> PromotionSpec:
        if self.mode == "pull_request" and (self.provider is None or self.repository is None):
            raise ValueError('mode = "pull_request" needs provider ("github" or "gitlab") and repository')
        shape = _GITHUB_REPOSITORY if self.provider == "github" else _GITLAB_PROJECT
        if self.repository is not None and (shape.fullmatch(self.repository) is None or ".." in self.repository):
            expected = "OWNER/NAME" if self.provider == "github" else "the project's path (GROUP/NAME) or its id"
            raise ValueError(f"repository must be {expected} (got '{self.repository}')")
        return self


class SyncWindowSpec(_Strict):
    """`[[sync_windows]]`: when this environment applies new commits."""

    kind: Literal["deny", "allow"] = Field(description="deny: hold new commits while open; allow: only while open.")
    schedule: str = Field(description="Five-field cron: when the window opens (minute hour day month weekday).")
    duration_s: float = Field(gt=0, description="Seconds the window stays open.")
    timezone: str = Field(default="UTC", description="The schedule's time zone (an IANA name, e.g. Europe/Berlin).")

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str) -> str:
        try:
            parse_cron(value)
        except CronError as error:
            raise ValueError(str(error)) from None
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"'{value}' is not a time zone of the zoneinfo database") from None
        return value


@dataclass(frozen=True)
class EnvironmentSettings:
    """What the agent of one environment reads from its file, besides overrides."""

    name: str
    promotion: PromotionSettings | None = None
    sync_windows: tuple[SyncWindow, ...] = ()


@dataclass(frozen=True)
class EnvironmentFile:
    """One environment file parsed: its overrides by (section, name), its
    settings, and its own errors (the file alone, before any merge)."""

    name: str
    path: str
    locations: Locations | LazyLocations = field(default_factory=Locations)
    overrides: Mapping[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    settings: EnvironmentSettings | None = None
    errors: tuple[SpecError, ...] = ()

    def error(self, loc: Loc, message: str, at_value: bool = False) -> SpecError:
        position = self.locations.find_value(loc) if at_value else self.locations.find(loc)
        return SpecError(self.path, *position, message)


def parse_environment(name: str, data: bytes | None, limits: SpecLimits = SpecLimits()) -> EnvironmentFile:
    """Environment `name`'s file (its bytes; None: it does not exist), checked on its own."""
    path = environment_path(name)
    empty = EnvironmentFile(name, path)
    if NAME_PATTERN.fullmatch(name) is None:
        return replace(empty, errors=(SpecError(path, 1, 1, f"environment name must match {NAME_PATTERN.pattern}"),))
    if data is None:
        return replace(empty, errors=(SpecError(path, 1, 1, f"environment '{name}' has no file {path}"),))
    if len(data) > limits.max_file_bytes:
        return replace(empty, errors=(SpecError(path, 1, 1, f"file is {len(data)} bytes; too big"),))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return replace(empty, errors=(SpecError(path, 1, 1, "file is not valid UTF-8"),))
    locations = locate_later(text, limits.max_depth)
    if isinstance(locations, Locations) and locations.too_deep is not None:
        return replace(empty, errors=(SpecError(path, *locations.too_deep, "values nest too deep"),))
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return replace(empty, errors=(_syntax_error(path, str(error)),))
    parsed = EnvironmentFile(name, path, locations)
    errors: list[SpecError] = []
    overrides = _overrides(parsed, document, errors)
    settings = _settings(parsed, document, errors)
    return replace(parsed, overrides=overrides, settings=settings, errors=tuple(errors))


def _syntax_error(path: str, message: str) -> SpecError:
    """tomllib says "... (at line L, column C)" or "... (at end of document)"."""
    found = _TOML_POSITION.search(message)
    if found is None:
        return SpecError(path, 1, 1, f"TOML syntax: {message}")
    return SpecError(path, int(found.group(1)), int(found.group(2)), f"TOML syntax: {message[: found.start()]}")


def _overrides(file: EnvironmentFile, document: dict[str, Any], errors: list[SpecError]) -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for key, value in document.items():
        if key in _SETTINGS:
            continue
        if key not in _SECTIONS:
            expected = "expected [backends.NAME], [endpoints.NAME], [promotion] or [[sync_windows]]"
            hint = did_you_mean(key, (*_SECTIONS, *_SETTINGS))
            errors.append(file.error((key,), f"unknown table '{key}' ({expected}){hint}"))
            continue
        if not isinstance(value, dict):
            errors.append(file.error((key,), f"'{key}' must be a table of named {key}"))
            continue
        allowed = overridable_keys(key)
        for name, table in value.items():
            at: Loc = (key, name)
            if not isinstance(table, dict):
                errors.append(file.error(at, f"{dotted(at)}: must be a table"))
                continue
            problems = _key_problems(at, table, allowed)
            errors.extend(file.error(loc, message) for loc, message in problems)
            if not problems:
                found[(key, name)] = table
    return found


def _key_problems(at: Loc, table: dict[str, Any], allowed: Mapping[str, frozenset[str] | None]) -> list[tuple[Loc, str]]:
    problems: list[tuple[Loc, str]] = []
    listed = ", ".join(sorted(allowed))
    for key, value in table.items():
        if key not in allowed:
            hint = did_you_mean(key, allowed)
            problems.append(((*at, key), f"{dotted((*at, key))}: not overridable per environment (these are: {listed}){hint}"))
            continue
        sub_keys = allowed[key]
        if sub_keys is not None and isinstance(value, dict):
            for sub in value:
                if sub not in sub_keys:
                    where = (*at, key, sub)
                    listed_sub = ", ".join(sorted(sub_keys))
                    hint = did_you_mean(sub, sub_keys)
                    problems.append((where, f"{dotted(where)}: not overridable per environment (in {key}: {listed_sub}){hint}"))
    return problems


def _settings(file: EnvironmentFile, document: dict[str, Any], errors: list[SpecError]) -> EnvironmentSettings:
    promotion = None
    raw = document.get("promotion")
    if raw is not None:
        spec = _validated(file, PromotionSpec, raw, ("promotion",), errors)
        if spec is not None:
            promotion = PromotionSettings(
                source=file.name,
                to=spec.to,
                branch=spec.branch,
                soak_s=spec.soak_s,
                require=tuple(Requirement.parse(text) for text in spec.require),
                mode=spec.mode,
                provider=spec.provider,
                repository=spec.repository,
                api_url=spec.api_url,
            )
            if spec.to == file.name:
                errors.append(file.error(("promotion", "to"), "promotion.to: an environment cannot promote to itself"))
    windows: list[SyncWindow] = []
    raw_windows = document.get("sync_windows", [])
    if not isinstance(raw_windows, list):
        errors.append(file.error(("sync_windows",), "sync_windows: must be an array of tables ([[sync_windows]])"))
        raw_windows = []
    for index, item in enumerate(raw_windows):
        window = _validated(file, SyncWindowSpec, item, ("sync_windows", index), errors)
        if window is not None:
            kind = WindowKind(window.kind)
            windows.append(SyncWindow(kind, window.schedule, parse_cron(window.schedule), window.duration_s, window.timezone))
    return EnvironmentSettings(file.name, promotion, tuple(windows))


def _validated(file: EnvironmentFile, model: type[_Strict], raw: Any, at: Loc, errors: list[SpecError]) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        for detail in error.errors():
            loc = (*at, *detail["loc"])
            message = detail["msg"].removeprefix("Value error, ")
            if detail["type"] == "extra_forbidden":
                message = f"unknown key '{loc[-1]}'{did_you_mean(loc[-1], known_keys(model, tuple(detail['loc'][:-1])))}"
            elif detail["type"] == "missing":
                message = f"missing required key '{loc[-1]}'"
            errors.append(file.error(loc, f"{dotted(loc)}: {message}"))
        return None


# --- merging -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Overridden(Declared):
    """A table of the spec tree with an environment's keys on top: an error
    at a key the environment set is located in the environment file."""

    environment: EnvironmentFile | None = None
    override: Mapping[str, Any] = field(default_factory=dict)

    def error(self, loc: Loc, message: str, at_value: bool = False) -> SpecError:
        inside = loc[2:]
        if self.environment is not None and inside and inside[0] in self.override:
            return self.environment.error(loc, message, at_value)
        return super().error(loc, message, at_value)


# Keys that say the same thing two ways: an environment setting one drops the tree's other.
_EITHER = (("num_replicas", "autoscaling"),)


def merged(section: str, base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `override` on top: tables with keys of their own merge key by key;
    a fixed `num_replicas` and `[autoscaling]` replace each other."""
    result = dict(base)
    for one, other in _EITHER:
        if one in override and other not in override:
            result.pop(other, None)
        if other in override and one not in override:
            result.pop(one, None)
    tables = _merging_keys(section)
    for key, value in override.items():
        below = result.get(key)
        if key in tables and isinstance(below, dict) and isinstance(value, dict):
            result[key] = {**below, **value}
        else:
            result[key] = value
    return result


def overlay(
    files: Mapping[str, ParsedFile], environment: EnvironmentFile, limits: SpecLimits = SpecLimits()
) -> tuple[dict[str, ParsedFile], tuple[SpecError, ...]]:
    """The spec files with `environment`'s overrides merged into their tables
    and each merged table checked again; plus the environment file's errors
    and every override naming a backend or endpoint the tree does not have."""
    errors = list(environment.errors)
    seen: set[tuple[str, str]] = set()
    result: dict[str, ParsedFile] = {}
    for path, parsed in files.items():
        tables: list[tuple[str, Declared]] = []
        for section, declared in parsed.tables:
            override = environment.overrides.get((section, declared.name))
            if override is None:
                tables.append((section, declared))
                continue
            seen.add((section, declared.name))
            if declared.spec is None or not isinstance(declared.raw, dict):
                tables.append((section, declared))  # the base's own errors are already reported
                continue
            tables.append((section, _recheck(section, declared, override, environment, limits, errors)))
        result[path] = ParsedFile(tuple(tables), parsed.errors)
    for section, name in environment.overrides:
        if (section, name) not in seen:
            kind = section[:-1]
            errors.append(environment.error((section, name), f"{section}.{name}: no {kind} '{name}' in the spec tree"))
    return result, tuple(errors)


def _recheck(
    section: str,
    declared: Declared,
    override: Mapping[str, Any],
    environment: EnvironmentFile,
    limits: SpecLimits,
    errors: list[SpecError],
) -> Declared:
    raw = merged(section, declared.raw, override)
    layered = Overridden(declared.name, declared.file, declared.locations, raw=raw, environment=environment, override=override)
    at: Loc = (section, declared.name)
    if section == "backends":
        spec, problems = check_backend(raw, at, limits.max_replicas)
    else:
        spec, problems = check_endpoint(raw, at)
    errors.extend(layered.error(problem.loc, problem.message, problem.at_value) for problem in problems)
    return replace(layered, spec=spec)
