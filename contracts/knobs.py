"""Settings in groups, set by flat names: a process's settings hold one `Group` per component
(the component takes it whole), while each knob keeps one flat name outside the process.

A knob's flat name is its environment variable after the plane's prefix
(`GEARBOX_DP_BREAKER_COOLDOWN_S` sets `breaker.cooldown_s`), its flag (`--breaker-cooldown-s`)
and the key a caller may pass (`DataPlaneSettings(breaker_cooldown_s=5)`). In a group it is the
group's `knob_prefix` plus the field's name, unless the field says otherwise with `Knob`: other
names, or standard variables read without the plane's prefix (`OTEL_TRACES_SAMPLER`).
A settings class derives from `KnobSettings`, which reads them with `FlatEnvSource` and folds
flat keys with `fold`.

Every environment variable with the plane's prefix must name a knob: a typo, or a name since
retired, would otherwise be ignored without a word. `FlatEnvSource` raises `UnknownKnobsError`
for them, each with the closest knob name or, for a name in the class's `renamed_knobs`, the
name that replaced it and what changed; the entry points print it and exit like any bad
setting.
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
    knob_prefix: ClassVar[str] = ""


class Knob:
    """A field's flat names when they are not `knob_prefix + name`: the first is the flag and
    the key; every one is an environment variable (the first one set wins), after the plane's
    prefix unless `prefixed=False`."""

    __slots__ = ("names", "prefixed")

    def __init__(self, *names: str, prefixed: bool = True) -> None:
        self.names, self.prefixed = names, prefixed


@dataclass(frozen=True)
class KnobSpec:
    flat: str  # the flag (dashes for underscores) and the key
    path: tuple[str, ...]  # ("breaker", "cooldown_s"), or ("instance_id",) at the top
    env: tuple[str, ...]  # environment variables, lower case, in priority order
    names: tuple[str, ...]  # every key that sets it, in priority order
    description: str | None


@dataclass(frozen=True)
class Renamed:
    """A retired flat name's successor (`new`, a flat name) and one line on what changed."""

    new: str
    change: str


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


def _spec(path: tuple[str, ...], info: FieldInfo, prefix: str, env_prefix: str) -> KnobSpec:
    knob = next((m for m in info.metadata if isinstance(m, Knob)), Knob())
    names = knob.names or (prefix + path[-1],)
    head = env_prefix if knob.prefixed else ""
    env = tuple((head + n).lower() for n in names)
    return KnobSpec(names[0], path, env, names, info.description)


@cache
def knobs(settings_cls: type[BaseSettings]) -> tuple[KnobSpec, ...]:
    """Every knob of a settings class, top-level fields first; raises on a name used twice."""
    env_prefix = str(settings_cls.model_config.get("env_prefix", ""))
    specs = []
    for name, info in settings_cls.model_fields.items():
        group = _group_of(info.annotation)
        if group is None:
            specs.append(_spec((name,), info, "", env_prefix))
            continue
        for sub, sub_info in group.model_fields.items():
            specs.append(_spec((name, sub), sub_info, group.knob_prefix, env_prefix))
    names = [n for s in specs for n in s.names]
    groups = [s.path[0] for s in specs if len(s.path) > 1]
    if len(set(names)) != len(names) or set(names) & set(groups):
        raise TypeError(f"{settings_cls.__name__}: a knob name is used twice")
    renamed = _renamed(settings_cls)
    if set(renamed) & set(names) or {r.new for r in renamed.values()} - set(names):
        raise TypeError(f"{settings_cls.__name__}: a renamed knob is a name, or its new one not")
    return tuple(specs)


def _renamed(settings_cls: type[BaseSettings]) -> Mapping[str, Renamed]:
    table: Mapping[str, Renamed] = getattr(settings_cls, "renamed_knobs", {})
    return table


def unknown_variables(
    settings_cls: type[BaseSettings], environ: Iterable[str]
) -> UnknownKnobsError | None:
    """The variables among `environ` with the class's env prefix (case-insensitive, as knobs
    are read) that no knob reads, each with its successor if it was renamed, else the
    closest knob name (difflib); None when there are none."""
    env_prefix = str(settings_cls.model_config.get("env_prefix", "")).lower()
    if not env_prefix:
        return None
    specs = knobs(settings_cls)
    known = {e for s in specs for e in s.env}
    pairs = [(n, e) for s in specs for n, e in zip(s.names, s.env, strict=True)]
    ours = [n for n, e in pairs if e.startswith(env_prefix)]
    renamed = _renamed(settings_cls)
    problems = []
    for var in sorted(v for v in environ if v.lower().startswith(env_prefix)):
        if var.lower() in known:
            continue
        name = var.lower().removeprefix(env_prefix)
        if (was := renamed.get(name)) is not None:
            why = f"renamed {(env_prefix + was.new).upper()}: {was.change}"
        elif close := difflib.get_close_matches(name, ours, n=1):
            why = f"no such setting; did you mean {(env_prefix + close[0]).upper()}?"
        else:
            why = "no such setting, and none has a similar name"
        problems.append((var, why))
    return UnknownKnobsError(problems) if problems else None


def knob_name(settings_cls: type[BaseSettings], loc: tuple[int | str, ...]) -> str:
    """The flat name of an error's location (`("breaker", "cooldown_s")` ->
    `breaker_cooldown_s`), else the location joined with dots."""
    for spec in knobs(settings_cls):
        if spec.path == loc[: len(spec.path)]:
            return spec.flat
    return ".".join(str(p) for p in loc)


def fold(settings_cls: type[BaseSettings], data: Any) -> Any:
    """Flat keys moved into their groups (`{"breaker_window_s": 5}` ->
    `{"breaker": {"window_s": 5}}`); a flat key wins over the same knob given nested.
    Unknown keys stay where they are, for the model to reject."""
    if not isinstance(data, Mapping):
        return data
    out = dict(data)
    for spec in knobs(settings_cls):
        if len(spec.path) == 1:
            continue
        group, field = spec.path
        for name in reversed(spec.names):  # the first name wins: written last
            if name not in out:
                continue
            current = out.get(group)
            nested = dict(current) if isinstance(current, BaseModel | Mapping) else {}
            nested[field] = out.pop(name)
            out[group] = nested
    return out


class FlatEnvSource(PydanticBaseSettingsSource):
    """Reads each knob from its environment variables (case-insensitive, raw strings, no
    JSON decoding), into its group; raises `UnknownKnobsError` for a prefixed variable no knob
    reads."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every knob at once

    def __call__(self) -> dict[str, Any]:
        if (unknown := unknown_variables(self.settings_cls, os.environ)) is not None:
            raise unknown
        environ = {k.lower(): v for k, v in os.environ.items()}
        found: dict[str, Any] = {}
        for spec in knobs(self.settings_cls):
            value = next((environ[e] for e in spec.env if e in environ), None)
            if value is not None:
                found[spec.flat] = value
        folded: dict[str, Any] = fold(self.settings_cls, found)
        return folded


class KnobSettings(BaseSettings):
    """A process's settings: keys given win over the environment, which is read by each
    knob's flat name; flat keys are folded into their groups. `renamed_knobs`: retired flat
    names, each with its successor, for the message that stops a process still setting one."""

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
