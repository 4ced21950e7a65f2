"""Settings in groups, one name per knob: a process's settings hold one `Group` per component
(the component takes it whole), and each knob is named by its path.

The rule (docs/data_plane.md, "Run it"): a knob's name is its path joined with `_`
(`breaker.cooldown_s` -> `breaker_cooldown_s`, a top-level `log_level` -> `log_level`). That
name is its environment variable after the plane's prefix, upper case
(`GEARBOX_DP_BREAKER_COOLDOWN_S`), its flag (`--breaker-cooldown-s`) and the key a caller may
pass (`DataPlaneSettings(breaker_cooldown_s=5)`). The one exception is a knob a standard
defines (OpenTelemetry's `OTEL_TRACES_SAMPLER`): `Standard` names its variables, read without
the prefix and instead of it; its flag and key are still its path.

A settings class derives from `KnobSettings`, which reads them with `FlatEnvSource` and folds
flat keys with `fold`. Every environment variable with the plane's prefix must name a knob: a
typo, or a name since retired, would otherwise be ignored without a word. `FlatEnvSource` raises
`UnknownKnobsError` for them, each with the closest knob name or, for a name in the class's
`renamed_knobs` whose meaning changed, the name that replaced it and what changed. A renamed
knob whose meaning did not change (`Renamed(new)`) keeps its old name as variable, flag and key
for one release; `renamed_in_use` lists the old names set, for the entry point to log.
"""

from __future__ import annotations

import difflib
import os
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource


class Group(BaseModel):
    """One component's knobs; unknown fields rejected, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class Standard:
    """A knob a standard names (OpenTelemetry): its environment variables, without the plane's
    prefix, in priority order (the first one set wins)."""

    __slots__ = ("variables",)

    def __init__(self, *variables: str) -> None:
        self.variables = variables


@dataclass(frozen=True)
class KnobSpec:
    flat: str  # the name: the path joined with "_"; the flag (dashes) and the key
    path: tuple[str, ...]  # ("breaker", "cooldown_s"), or ("instance_id",) at the top
    env: tuple[str, ...]  # environment variables, lower case, in priority order
    description: str | None


@dataclass(frozen=True)
class Renamed:
    """A retired name's successor (`new`, a knob's name). `change` is None when only the name
    changed: the old name still sets the knob, for one release, and the entry point logs
    the new one. Otherwise it says in one line what changed, and the old name stops the
    process naming `new`."""

    new: str
    change: str | None = None

    @property
    def still_read(self) -> bool:
        return self.change is None


class UnknownKnobsError(ValueError):
    """Environment variables with the plane's prefix that name no knob: `problems` holds one
    (variable, what to do) pair each, in name order."""

    def __init__(self, problems: Iterable[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{var}: {why}" for var, why in self.problems))


def _group_of(annotation: Any) -> type[Group] | None:
    if isinstance(annotation, type) and issubclass(annotation, Group):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return next((g for a in typing.get_args(annotation) if (g := _group_of(a))), None)
    return None


def _env_prefix(settings_cls: type[BaseSettings]) -> str:
    return str(settings_cls.model_config.get("env_prefix", "")).lower()


def _spec(path: tuple[str, ...], info: FieldInfo, env_prefix: str) -> KnobSpec:
    name = "_".join(path)
    standard = next((m for m in info.metadata if isinstance(m, Standard)), None)
    env = tuple(v.lower() for v in standard.variables) if standard else (env_prefix + name,)
    return KnobSpec(name, path, env, info.description)


@cache
def knobs(settings_cls: type[BaseSettings]) -> tuple[KnobSpec, ...]:
    """Every knob of a settings class, top-level fields first; raises on a name used twice,
    or a renamed table that names a knob as retired or a retired name's successor as none."""
    env_prefix = _env_prefix(settings_cls)
    specs = []
    for name, info in settings_cls.model_fields.items():
        group = _group_of(info.annotation)
        if group is None:
            specs.append(_spec((name,), info, env_prefix))
            continue
        for sub, sub_info in group.model_fields.items():
            specs.append(_spec((name, sub), sub_info, env_prefix))
    names = [s.flat for s in specs]
    groups = [s.path[0] for s in specs if len(s.path) > 1]
    if len(set(names)) != len(names) or set(names) & set(groups):
        raise TypeError(f"{settings_cls.__name__}: a knob name is used twice")
    renamed = renamed_knobs(settings_cls)
    if set(renamed) & set(names) or {r.new for r in renamed.values()} - set(names):
        raise TypeError(f"{settings_cls.__name__}: a renamed knob is a name, or its new one not")
    return tuple(specs)


def renamed_knobs(settings_cls: type[BaseSettings]) -> Mapping[str, Renamed]:
    table: Mapping[str, Renamed] = getattr(settings_cls, "renamed_knobs", {})
    return table


@cache
def _old_variables(settings_cls: type[BaseSettings]) -> Mapping[str, KnobSpec]:
    """Old variable (lower case) -> the knob it still sets: renamed knobs whose meaning did not
    change and whose new name is read with the prefix (a standard's knob never had one)."""
    env_prefix = _env_prefix(settings_cls)
    by_name = {s.flat: s for s in knobs(settings_cls)}
    return {
        env_prefix + old: spec
        for old, was in renamed_knobs(settings_cls).items()
        if was.still_read and (spec := by_name[was.new]).env == (env_prefix + spec.flat,)
    }


def _why(settings_cls: type[BaseSettings], name: str) -> str:
    """What to do about `name` (a variable without the prefix) that no knob reads: its
    successor if renamed, else the variable of the knob whose name (or old name still read)
    is closest."""
    env_prefix = _env_prefix(settings_cls)
    specs = knobs(settings_cls)
    if (was := renamed_knobs(settings_cls).get(name)) is not None:
        new = next(s.env[0].upper() for s in specs if s.flat == was.new)
        return f"renamed {new}: {was.change}" if was.change else f"renamed {new}"
    ours = {s.flat: s.env[0] for s in specs if s.env == (env_prefix + s.flat,)}
    ours |= {
        old.removeprefix(env_prefix): spec.env[0]
        for old, spec in _old_variables(settings_cls).items()
    }
    if close := difflib.get_close_matches(name, list(ours), n=1):
        return f"no such setting; did you mean {ours[close[0]].upper()}?"
    return "no such setting, and none has a similar name"


def unknown_variables(
    settings_cls: type[BaseSettings], environ: Iterable[str]
) -> UnknownKnobsError | None:
    """The variables among `environ` with the class's env prefix (case-insensitive, as knobs
    are read) that no knob reads, each with its successor if it was renamed, else the
    closest knob name (difflib); None when there are none."""
    env_prefix = _env_prefix(settings_cls)
    if not env_prefix:
        return None
    known = {e for s in knobs(settings_cls) for e in s.env} | set(_old_variables(settings_cls))
    problems = [
        (var, _why(settings_cls, var.lower().removeprefix(env_prefix)))
        for var in sorted(v for v in environ if v.lower().startswith(env_prefix))
        if var.lower() not in known
    ]
    return UnknownKnobsError(problems) if problems else None


def renamed_in_use(
    settings_cls: type[BaseSettings], environ: Iterable[str] | None = None
) -> tuple[tuple[str, str], ...]:
    """(old variable, its knob's variable) for each old name among `environ` (default: this
    process's environment) that still sets its knob, in name order: what the entry point logs
    so the operator moves to the new name."""
    environ = os.environ if environ is None else environ
    old = _old_variables(settings_cls)
    used = sorted(v for v in environ if v.lower() in old)
    return tuple((v, old[v.lower()].env[0].upper()) for v in used)


def knob_name(settings_cls: type[BaseSettings], loc: tuple[int | str, ...]) -> str:
    """The name of an error's location (`("breaker", "cooldown_s")` -> `breaker_cooldown_s`),
    else the location joined with dots."""
    for spec in knobs(settings_cls):
        if spec.path == loc[: len(spec.path)]:
            return spec.flat
    return ".".join(str(p) for p in loc)


def fold(settings_cls: type[BaseSettings], data: Any) -> Any:
    """Old names still read moved to their new ones (a new name given wins), then flat keys
    moved into their groups (`{"breaker_window_s": 5}` -> `{"breaker": {"window_s": 5}}`); a
    flat key wins over the same knob given nested. Unknown keys stay where they are, for the
    model to reject."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for old, was in renamed_knobs(settings_cls).items():
        if was.still_read and old in out:
            value = out.pop(old)
            out.setdefault(was.new, value)
    for spec in knobs(settings_cls):
        if len(spec.path) == 1 or spec.flat not in out:
            continue
        group, field = spec.path
        current = out.get(group)
        nested = dict(current) if isinstance(current, BaseModel | Mapping) else {}
        nested[field] = out.pop(spec.flat)
        out[group] = nested
    return out


class FlatEnvSource(PydanticBaseSettingsSource):
    """Reads each knob from its environment variables (case-insensitive, raw strings, no
    JSON decoding), else from an old name that still sets it, into its group; raises
    `UnknownKnobsError` for a prefixed variable no knob reads."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every knob at once

    def __call__(self) -> dict[str, Any]:
        if (unknown := unknown_variables(self.settings_cls, os.environ)) is not None:
            raise unknown
        environ = {k.lower(): v for k, v in os.environ.items()}
        found: dict[str, Any] = {}
        for old, spec in _old_variables(self.settings_cls).items():
            if old in environ:
                found[spec.flat] = environ[old]
        for spec in knobs(self.settings_cls):
            value = next((environ[e] for e in spec.env if e in environ), None)
            if value is not None:
                found[spec.flat] = value  # the new name wins over an old one
        folded: dict[str, Any] = fold(self.settings_cls, found)
        return folded


class KnobSettings(BaseSettings):
    """A process's settings: keys given win over the environment, which is read by each
    knob's name; flat keys are folded into their groups. `renamed_knobs`: retired names, each
    with its successor (`Renamed`)."""

    renamed_knobs: ClassVar[Mapping[str, Renamed]] = types.MappingProxyType({})

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, FlatEnvSource(settings_cls)

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        return fold(cls, data)
