"""Reading and validating a vendor plugin's settings, shared by every vendor plugin.

Why in the core: each vendor's settings are read in two processes that share nothing but the
vendor spec, so every plugin reads the file named by ``XPUSHARE_<VENDOR>_CONFIG`` (YAML or
JSON, e.g. a mounted ConfigMap), lets ``XPUSHARE_<VENDOR>_LIBRARY`` override
``library_path``, validates the result with its pydantic model and remembers the validated
model per ``VendorSpec.config`` object. The plugins had copied that code; one copy here keeps
their error messages and edge cases from drifting apart. Each plugin still owns its model and
the wording of its errors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

__all__ = ["SettingsCache", "describe_errors", "load_settings", "validate"]

M = TypeVar("M", bound=BaseModel)

#: How many distinct settings objects a :class:`SettingsCache` remembers by default: a process
#: sees one ``VendorSpec.config`` per vendor plus a few test or reload copies.
DEFAULT_CACHE_SIZE: Final = 16


def load_settings(
    label: str,
    config_env: str,
    library_env: str,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The settings in the file named by *config_env* ({} when unset or blank).

    A non-blank *library_env* sets ``library_path`` over what the file says. *label* is the
    vendor as the messages show it, e.g. ``"AMD"``.

    :raises ValueError: the file cannot be read or does not hold a mapping; names the file and
        the variable that named it.
    """
    env = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    path = env.get(config_env, "").strip()
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
            data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError) as exc:
            raise ValueError(
                f"cannot read the {label} config file {path} ({config_env}): {exc}"
            ) from exc
        if data is not None and not isinstance(data, dict):
            raise ValueError(f"the {label} config file {path} ({config_env}) must hold a mapping")
        raw.update(data or {})
    library = env.get(library_env, "").strip()
    if library:
        raw["library_path"] = library
    return raw


def describe_errors(exc: ValidationError) -> str:
    """Each wrong field of *exc* as ``dotted.field: what is wrong``, joined by ``; ``."""
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(section)'}: {err['msg']}"
        for err in exc.errors()
    )


def validate(
    model: type[M], settings: Mapping[str, Any], message: Callable[[ValidationError], str]
) -> M:
    """*settings* validated as *model*.

    :raises ValueError: ``message(exc)``, without pydantic's traceback chained to it.
    """
    try:
        return model.model_validate(dict(settings))
    except ValidationError as exc:
        raise ValueError(message(exc)) from None


class SettingsCache(Generic[M]):
    """Validated settings remembered per settings object (a vendor spec's ``config``).

    Scheduler-side hooks run thousands of times a second with the same ``VendorSpec.config``
    dict: validating it once saves that work. The dict itself is kept in the entry, so its id
    cannot be reused by another object while the entry lives.
    """

    def __init__(self, size: int = DEFAULT_CACHE_SIZE) -> None:
        if size < 1:
            raise ValueError(f"a settings cache needs room for at least one entry, not {size}")
        self._size = size
        self._entries: dict[int, tuple[Mapping[str, Any], M]] = {}

    def get(self, settings: Mapping[str, Any], parse: Callable[[Mapping[str, Any]], M]) -> M:
        """``parse(settings)``, or what it returned for this same object before."""
        hit = self._entries.get(id(settings))
        if hit is not None and hit[0] is settings:
            return hit[1]
        config = parse(settings)
        if len(self._entries) >= self._size:
            self._entries.clear()
        self._entries[id(settings)] = (settings, config)
        return config
