"""How the plugin host is steered from the environment (DaemonSets and CI set these).

``XPUSHARE_PLUGINS``        comma list: load only these plugins (allow-list); unset loads all
``XPUSHARE_DISABLE_PLUGINS`` comma list: never load these (deny-list, wins over the allow-list)
``XPUSHARE_STRICT_PLUGINS``  1: a plugin that fails to load raises instead of being recorded
                            (CI and plugin development, where a broken plugin must be loud)
``XPUSHARE_TRACE_HOOKS``     1: log every hook call with its arguments and result
"""

from collections.abc import Mapping
from dataclasses import dataclass

ALLOW_ENV = "XPUSHARE_PLUGINS"
DENY_ENV = "XPUSHARE_DISABLE_PLUGINS"
STRICT_ENV = "XPUSHARE_STRICT_PLUGINS"
TRACE_ENV = "XPUSHARE_TRACE_HOOKS"

_TRUE = frozenset({"1", "true", "yes", "on"})


def _names(value: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class HostSettings:
    allow: frozenset[str] | None = None
    deny: frozenset[str] = frozenset()
    strict: bool = False
    trace: bool = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> "HostSettings":
        return cls(
            allow=_names(environ.get(ALLOW_ENV)),
            deny=_names(environ.get(DENY_ENV)) or frozenset(),
            strict=environ.get(STRICT_ENV, "").strip().lower() in _TRUE,
            trace=environ.get(TRACE_ENV, "").strip().lower() in _TRUE,
        )

    def blocked_reason(self, name: str) -> str | None:
        if name in self.deny:
            return f"disabled by {DENY_ENV}"
        if self.allow is not None and name not in self.allow:
            return f"not in {ALLOW_ENV}"
        return None
