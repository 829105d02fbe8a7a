"""`automation.toml`: the repository's `[automation.NAME]` tables, checked with FILE:LINE:COL errors.

The file sits at the repository root, beside `environments/` (it is never
a spec file, even with the root as the spec path). Each table says which
moving reference to watch and which `[models.NAME]` it moves
(`gitops.delivery.automation.Automation`; docs/reference/spec.md):

    [automation.sentiment]
    model = "sentiment"
    watch = "s3://models/sentiment/"
    pick = "highest-version"        # s3:// only: newest | highest-version
    match = "^v[0-9]+/$"            # s3:// only, optional
    interval_s = 300
    mode = "pull_request"           # or "commit" ("pull-request" is read as "pull_request")
    provider = "github"
    repository = "acme/serving"

`watch` is `s3://BUCKET/PREFIX/` (with `pick`), `hf://ORG/NAME@BRANCH`,
`oci://REGISTRY/REPO:TAG` (one tag's digest followed) or `oci://REGISTRY/REPO`
(with `pick = "semver"` or `"highest-version"` and an optional `match`: the
highest version among the repository's tags, `vocabulary.replicas.oci_tags`). `pick`, `match` and
`kind` are refused, at their key, where the reference takes none. Whether
`model` names a `[models.NAME]` of the spec tree is checked against the tree
(`unknown_models`). Pure: bytes in, values and `SpecError`s out.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gitops.delivery.automation import Automation
from gitops.specs.documents import SpecError
from gitops.specs.environments import PromotionSpec
from gitops.specs.limits import SpecLimits
from gitops.specs.locating import locate
from gitops.specs.models import NAME_PATTERN, did_you_mean, dotted, known_keys
from vocabulary.replicas.hub_sources import parse_hub_source
from vocabulary.replicas.oci_sources import parse_oci_reference
from vocabulary.replicas.oci_tags import TAG_PICKS
from vocabulary.replicas.s3_picks import PICKS, compile_match, parse_s3_prefix

__all__ = ["AUTOMATION_PATH", "AutomationFile", "parse_automation", "unknown_models"]

AUTOMATION_PATH = "automation.toml"
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_GITHUB_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_GITLAB_PROJECT = re.compile(r"[0-9]+|[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+")


class AutomationSpec(BaseModel):
    """`[automation.NAME]`: a moving reference watched, and the model it moves."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    model: str = Field(description="The [models.NAME] table (in a spec file) whose pin this automation moves.")
    watch: str = Field(description="s3://BUCKET/PREFIX/ (with pick), hf://ORG/NAME@BRANCH, oci://REGISTRY/REPO:TAG "
                       "(one tag) or oci://REGISTRY/REPO (with pick = \"semver\" or \"highest-version\": a tag of the "
                       "repository's).")
    pick: Literal["newest", "highest-version", "semver"] | None = Field(
        default=None, description="s3://: newest or highest-version; an oci:// repository: semver (the highest "
        "release; a pre-release only when match reaches past its '-') or highest-version (the numbers in the tag, "
        "or in match's version group: build numbers, dates).")
    match: str | None = Field(default=None, description="s3:// and an oci:// repository: a regex an entry's name "
                              "or a tag must contain; for highest-version, its group 'version' (or first group) "
                              "holds the version.")
    kind: Literal["file", "directory"] | None = Field(default=None, description="s3://: files or directories.",
                                                      examples=["directory"])
    interval_s: float = Field(default=300.0, ge=1, description="Seconds between two looks at the reference.")
    mode: Literal["commit", "pull_request", "pull-request"] = Field(
        default="pull_request", description="commit: push to the branch; pull_request: open or update a PR/MR."
    )
    branch: str | None = Field(
        default=None, description="Where the pin goes (default: the agent's branch).", examples=["main"]
    )
    provider: Literal["github", "gitlab"] | None = Field(default=None, description="Where pull requests are opened.")
    repository: str | None = Field(default=None, description="owner/name on GitHub; the project on GitLab.")
    api_url: str | None = Field(
        default=None, description="The forge API's base URL (the agent must allow it: --promote-api-url).",
        examples=["https://github.example.com/api/v3"],
    )
    environment: str | None = Field(
        default=None, description="Run by the agent with this --environment (default: an agent without one).",
        examples=["dev"],
    )

    @field_validator("model", "environment")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and NAME_PATTERN.fullmatch(value) is None:
            raise ValueError(f"must be a name ({NAME_PATTERN.pattern})")
        return value

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        compile_match(value)
        return value

    @field_validator("branch")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        return None if value is None else PromotionSpec._branch_name(value)

    @field_validator("api_url")
    @classmethod
    def _api(cls, value: str | None) -> str | None:
        return PromotionSpec._api_url(value)

def forge_problems(spec: AutomationSpec) -> list[tuple[str | None, str]]:
    """What is wrong with where the pin goes (a pull request's forge and repository), each with its key."""
    if spec.mode != "commit" and (spec.provider is None or spec.repository is None):
        return [(None, 'mode = "pull_request" needs provider ("github" or "gitlab") and repository')]
    shape = _GITHUB_REPOSITORY if spec.provider == "github" else _GITLAB_PROJECT
    if spec.repository is not None and (shape.fullmatch(spec.repository) is None or ".." in spec.repository):
        expected = "OWNER/NAME" if spec.provider == "github" else "the project's path (GROUP/NAME) or its id"
        return [("repository", f"must be {expected} (got '{spec.repository}')")]
    return []


def reference_problems(spec: AutomationSpec) -> list[tuple[str | None, str]]:
    """What is wrong with `watch` and the keys that say how it is read, each with its key (None: the table)."""
    given = [key for key in ("pick", "match", "kind") if getattr(spec, key) is not None]
    if spec.watch.startswith("s3://"):
        try:
            parse_s3_prefix(spec.watch)
        except ValueError as error:
            return [("watch", str(error))]
        if spec.pick is None:
            return [(None, f"an s3:// prefix needs pick ({' or '.join(PICKS)})")]
        if spec.pick not in PICKS:
            return [("pick", f"an s3:// prefix is picked by {' or '.join(PICKS)} ('{spec.pick}' picks an oci:// "
                             "repository's tags)")]
        return []
    if spec.watch.startswith("hf://"):
        try:
            parse_hub_source(spec.watch)
        except ValueError as error:
            return [("watch", str(error))]
        return [(key, "is for an s3:// prefix or an oci:// repository; an hf:// branch names one commit")
                for key in given]
    if spec.watch.startswith("oci://"):
        try:
            reference = parse_oci_reference(spec.watch)
        except ValueError as error:
            return [("watch", str(error))]
        name = f"oci://{reference.registry}/{reference.repository}"
        if reference.digest is not None:
            return [("watch", f"a digest never moves: watch a tag ({name}:TAG) or the repository's tags "
                              f'({name} with pick = "semver")')]
        if reference.tag is not None:
            return [(key, f"is for an oci:// repository's tags ({name}); {spec.watch} follows one tag")
                    for key in given]
        if spec.pick is None:
            return [(None, f'an oci:// repository needs pick = "semver" or "highest-version" (or watch one tag: '
                           f'{name}:TAG)')]
        problems: list[tuple[str | None, str]] = []
        if spec.pick not in TAG_PICKS:
            problems.append(("pick", f"an oci:// repository's tags are picked by {' or '.join(TAG_PICKS)}"))
        if spec.kind is not None:
            problems.append(("kind", "is for an s3:// prefix (files or directories); an oci:// tag names an image"))
        return problems
    return [("watch", "must be s3://BUCKET/PREFIX/, hf://ORG/NAME@BRANCH, oci://REGISTRY/REPO:TAG or "
                      "oci://REGISTRY/REPO")]


@dataclass(frozen=True)
class AutomationFile:
    automations: tuple[Automation, ...] = ()
    errors: tuple[SpecError, ...] = ()


def parse_automation(data: bytes | None, limits: SpecLimits = SpecLimits()) -> AutomationFile:
    """`automation.toml`'s bytes (None: there is none) as automations, or its errors at FILE:LINE:COL."""
    path = AUTOMATION_PATH
    if data is None:
        return AutomationFile()
    if len(data) > limits.max_file_bytes:
        return AutomationFile(errors=(SpecError(path, 1, 1, f"file is {len(data)} bytes; too big"),))
    try:
        text = data.decode("utf-8")
        document = tomllib.loads(text)
    except UnicodeDecodeError:
        return AutomationFile(errors=(SpecError(path, 1, 1, "file is not valid UTF-8"),))
    except tomllib.TOMLDecodeError as error:
        found = _TOML_POSITION.search(str(error))
        line, col = (int(found.group(1)), int(found.group(2))) if found else (1, 1)
        said = str(error)[: found.start()] if found else str(error)
        return AutomationFile(errors=(SpecError(path, line, col, f"TOML syntax: {said}"),))
    locations = locate(text, limits.max_depth)

    def located(loc: tuple[str | int, ...], message: str) -> SpecError:
        return SpecError(path, *locations.find(loc), message)

    errors: list[SpecError] = []
    for key in document:
        if key != "automation":
            hint = did_you_mean(key, ("automation",))
            errors.append(located((key,), f"unknown table '{key}' (expected [automation.NAME]){hint}"))
    tables = document.get("automation", {})
    if not isinstance(tables, dict):
        return AutomationFile(errors=(located(("automation",), "automation: must be a table of named automations"),))
    automations: list[Automation] = []
    models: dict[str, str] = {}
    for name, raw in tables.items():
        at: tuple[str | int, ...] = ("automation", name)
        if NAME_PATTERN.fullmatch(name) is None:
            errors.append(located(at, f"automation name '{name}' must match {NAME_PATTERN.pattern}"))
            continue
        if not isinstance(raw, dict):
            errors.append(located(at, f"{dotted(at)}: must be a table"))
            continue
        try:
            spec = AutomationSpec.model_validate(raw)
        except ValidationError as invalid:
            for detail in invalid.errors():
                loc = (*at, *detail["loc"])
                message = detail["msg"].removeprefix("Value error, ")
                if detail["type"] == "extra_forbidden":
                    message = f"unknown key '{loc[-1]}'{did_you_mean(str(loc[-1]), known_keys(AutomationSpec, ()))}"
                elif detail["type"] == "missing":
                    message = f"missing required key '{loc[-1]}'"
                errors.append(located(loc, f"{dotted(loc)}: {message}"))
            continue
        problems = reference_problems(spec) + forge_problems(spec)
        for wrong_key, problem in problems:
            loc = at if wrong_key is None else (*at, wrong_key)
            errors.append(located(loc, f"{dotted(loc)}: {problem}"))
        if problems:
            continue
        if spec.model in models:
            errors.append(located((*at, "model"), f"{dotted((*at, 'model'))}: model '{spec.model}' is moved by "
                                f"automation.{models[spec.model]} already (one automation per model)"))
            continue
        models[spec.model] = name
        automations.append(Automation(
            name=name, model=spec.model, watch=spec.watch, pick=spec.pick, match=spec.match, kind=spec.kind,
            interval_s=spec.interval_s, mode="commit" if spec.mode == "commit" else "pull_request",
            branch=spec.branch, provider=spec.provider, repository=spec.repository, api_url=spec.api_url,
            environment=spec.environment,
        ))
    return AutomationFile(tuple(automations), tuple(errors))


def unknown_models(data: bytes, automations: Iterable[Automation], declared: Iterable[str]) -> list[SpecError]:
    """An error at each automation's `model` that names no `[models.NAME]` of the spec tree."""
    names = set(declared)
    locations = locate(data.decode("utf-8", "replace"))
    errors = []
    for automation in automations:
        if automation.model not in names:
            loc = ("automation", automation.name, "model")
            errors.append(SpecError(AUTOMATION_PATH, *locations.find_value(loc),
                                    f"automation.{automation.name}.model: no [models.{automation.model}] in the spec files"
                                    f"{did_you_mean(automation.model, names)}"))
    return errors

