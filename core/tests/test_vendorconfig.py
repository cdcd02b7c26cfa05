"""The shared reading and validating of a vendor plugin's settings (xpushare.vendorconfig)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from xpushare.vendorconfig import SettingsCache, describe_errors, load_settings, validate

CONFIG_ENV = "XPUSHARE_ACME_CONFIG"
LIBRARY_ENV = "XPUSHARE_ACME_LIBRARY"


class AcmeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    library_path: str | None = None
    share_slots: int = Field(default=4, ge=1)


def _load(environ: dict[str, str]) -> dict[str, Any]:
    return load_settings("Acme", CONFIG_ENV, LIBRARY_ENV, environ)


def test_nothing_set_gives_no_settings() -> None:
    assert _load({}) == {}
    assert _load({CONFIG_ENV: "  "}) == {}


def test_reads_yaml_and_json_files(tmp_path: Path) -> None:
    yaml_file = tmp_path / "acme.yaml"
    yaml_file.write_text("share_slots: 7\nlibrary_path: /opt/acme/lib.so\n", encoding="utf-8")
    json_file = tmp_path / "acme.json"
    json_file.write_text('{"share_slots": 3}', encoding="utf-8")

    assert _load({CONFIG_ENV: f" {yaml_file} "}) == {
        "share_slots": 7,
        "library_path": "/opt/acme/lib.so",
    }
    assert _load({CONFIG_ENV: str(json_file)}) == {"share_slots": 3}


def test_empty_file_is_no_settings(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert _load({CONFIG_ENV: str(empty)}) == {}


def test_library_variable_overrides_the_file(tmp_path: Path) -> None:
    config = tmp_path / "acme.yaml"
    config.write_text("library_path: /from/file.so\n", encoding="utf-8")
    environ = {CONFIG_ENV: str(config), LIBRARY_ENV: " /from/env.so "}
    assert _load(environ) == {"library_path": "/from/env.so"}
    # A blank override is no override.
    assert _load({LIBRARY_ENV: "   "}) == {}


def test_unreadable_file_names_vendor_file_and_variable(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ValueError, match="cannot read the Acme config file") as info:
        _load({CONFIG_ENV: str(missing)})
    assert str(missing) in str(info.value)
    assert CONFIG_ENV in str(info.value)


def test_malformed_json_and_yaml_are_errors(tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json", encoding="utf-8")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("a: [unclosed\n", encoding="utf-8")
    for path in (bad_json, bad_yaml):
        with pytest.raises(ValueError, match=f"cannot read the Acme config file {path}"):
            _load({CONFIG_ENV: str(path)})


def test_file_that_is_not_a_mapping_is_an_error(tmp_path: Path) -> None:
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(ValueError) as info:
        _load({CONFIG_ENV: str(listing)})
    assert str(info.value) == f"the Acme config file {listing} ({CONFIG_ENV}) must hold a mapping"


def test_validate_returns_the_model() -> None:
    config = validate(AcmeConfig, {"share_slots": 2}, lambda exc: "unused")
    assert config == AcmeConfig(share_slots=2)


def test_validate_raises_the_plugins_message_without_chaining() -> None:
    with pytest.raises(ValueError) as info:
        validate(AcmeConfig, {"share_slots": 0, "typo": 1}, lambda exc: f"bad Acme: {exc}")
    assert str(info.value).startswith("bad Acme: 2 validation errors")
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


def test_describe_errors_names_each_field() -> None:
    with pytest.raises(ValidationError) as info:
        AcmeConfig.model_validate({"share_slots": 0, "typo": 1})
    text = describe_errors(info.value)
    parts = text.split("; ")
    assert len(parts) == 2
    assert parts[0].startswith("share_slots: ")
    assert parts[1] == "typo: Extra inputs are not permitted"


def test_cache_parses_each_settings_object_once() -> None:
    calls: list[int] = []

    def parse(settings: Any) -> AcmeConfig:
        calls.append(id(settings))
        return AcmeConfig.model_validate(dict(settings))

    cache: SettingsCache[AcmeConfig] = SettingsCache()
    settings = {"share_slots": 5}
    first = cache.get(settings, parse)
    assert cache.get(settings, parse) is first
    assert len(calls) == 1
    # An equal but distinct object is parsed again: identity, not equality, is the key.
    assert cache.get({"share_slots": 5}, parse) == first
    assert len(calls) == 2


def test_cache_forgets_when_full_and_keeps_working() -> None:
    calls = 0

    def parse(settings: Any) -> AcmeConfig:
        nonlocal calls
        calls += 1
        return AcmeConfig.model_validate(dict(settings))

    cache: SettingsCache[AcmeConfig] = SettingsCache(size=2)
    kept = [{"share_slots": n} for n in (1, 2, 3)]
    for settings in kept:
        cache.get(settings, parse)
    assert calls == 3
    # The third entry emptied the cache before it was stored: it is remembered, the first is not.
    assert cache.get(kept[2], parse).share_slots == 3
    assert calls == 3
    assert cache.get(kept[0], parse).share_slots == 1
    assert calls == 4


def test_cache_needs_room() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        SettingsCache[AcmeConfig](size=0)
