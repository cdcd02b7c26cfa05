"""What the host knows about each plugin it tried to load, for ``xpushare plugins`` and metrics."""

from dataclasses import dataclass, field
from enum import StrEnum

from xpushare.models import VendorSpec


class PluginState(StrEnum):
    """Load state of a plugin; whether a vendor works on *this node* is a separate question."""

    LOADED = "loaded"
    FAILED = "failed"
    BLOCKED = "blocked"


class PluginKind(StrEnum):
    VENDOR = "vendor"
    EXTENSION = "extension"
    CORE = "core"


@dataclass
class PluginRecord:
    name: str
    kind: PluginKind
    state: PluginState
    distribution: str | None = None
    version: str | None = None
    hooks: tuple[str, ...] = ()
    error: str | None = None
    spec: VendorSpec | None = field(default=None, repr=False)

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "distribution": self.distribution,
            "version": self.version,
            "state": self.state.value,
            "hooks": list(self.hooks),
            "error": self.error,
            "resources": list(self.spec.resource_names.all()) if self.spec else [],
        }
