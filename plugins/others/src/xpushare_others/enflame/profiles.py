"""Which DRS profiles a GCU offers: read from the GCU with efsmi, or from the settings.

Why efsmi: EFML publishes no DRS call, and the profiles (their names, Enflame's ids, how many
instances of each fit) are the GCU's, not the cluster's; Enflame's own device plugin reads
them with ``efsmi -i <index> --drs --list-profile`` and so does the node agent, at detection,
on the vendor thread, with the efsmi time limit and a bounded listing
(:meth:`.efsmi.Efsmi.profiles`). The listing needs DRS on: as Enflame's plugin does, DRS is
turned on to read it when the first try fails, and off again when the GCU holds no instance.

Where the settings come in: ``drs_profiles`` written in the settings *override* what efsmi
lists (each difference is logged, naming the GCU and the profile, so a stale file is seen);
unset, they are the *fallback* used while efsmi cannot be run or its listing is refused (also
logged, and read again at the next detection). A listing read is kept per GCU (index and
UUID), so the agent's periodic detection runs efsmi once per GCU, not every minute.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from xpushare.models import PartitionProfile
from xpushare_others.enflame import drs
from xpushare_others.enflame.config import EnflameConfig
from xpushare_others.enflame.efsmi import Efsmi, EfsmiError, EfsmiFailed, ListedProfile

log = logging.getLogger(__name__)

#: Most GCUs whose listing is kept: a node has a handful of GCUs; a replaced GCU (a new UUID
#: at the same index) adds an entry, so the table is emptied when it reaches this.
MAX_KEPT: Final = 256


@dataclass(frozen=True, slots=True)
class Layout:
    """What one DRS GCU publishes: its slices, profiles, their ids (``extra`` keys), memory."""

    slices: int
    partitions: tuple[PartitionProfile, ...]
    ids: dict[str, str]
    memory_mib: int
    #: ``efsmi`` or ``settings``: where the profiles came from (published in ``extra``).
    source: str


def layout(
    named: Mapping[str, str],
    configured_capacity: int | None,
    counts: Mapping[str, int] | None = None,
    source: str = "settings",
) -> Layout:
    """The layout of profiles *named* (name → Enflame's id); *counts*: how many instances of
    each the GCU holds, as efsmi lists them (else as many as its slices hold)."""
    candidates = drs.profiles(named)
    largest = max((p.slices for p in candidates), default=1)
    slices = max(drs.capacity(named, configured_capacity), largest)
    parts = tuple(
        PartitionProfile(
            name=p.name,
            memory_mib=p.memory_mib,
            compute_percent=p.compute_percent,
            max_count=(counts or {}).get(p.name) or max(1, slices // p.slices),
        )
        for p in candidates
    )
    ids = {f"{drs.PROFILE_ID_PREFIX}{p.name}": p.id for p in candidates}
    memory = max((p.memory_mib for p in candidates), default=0)
    return Layout(slices, parts, ids, memory, source)


def settings_layout(config: EnflameConfig) -> Layout:
    return layout(config.drs_profiles, config.drs_capacity)


def read(tool: Efsmi, gcu: int) -> list[ListedProfile]:
    """GCU *gcu*'s profiles, turning DRS on to list them when it is off (Enflame's way)."""
    try:
        return tool.profiles(gcu)
    except EfsmiFailed:
        pass  # DRS off, most likely: what Enflame's plugin turns on before listing
    tool.drs_on(gcu)
    try:
        return tool.profiles(gcu)
    finally:
        if not tool.instances(gcu):
            tool.drs_off(gcu)


def mismatches(gcu: str, configured: Mapping[str, str], listed: list[ListedProfile]) -> list[str]:
    """How the settings' ``drs_profiles`` differ from what efsmi lists for GCU *gcu*."""
    by_name = {p.name: p for p in listed}
    out = []
    for name, pid in sorted(configured.items()):
        found = by_name.get(name.strip().lower())
        if found is None:
            shown = ", ".join(sorted(by_name)) or "none"
            out.append(
                f"Enflame GCU {gcu}: DRS profile {name} of the settings' drs_profiles is not "
                f"listed by efsmi (it lists {shown}); an instance of it cannot be cut"
            )
        elif found.id != pid:
            out.append(
                f"Enflame GCU {gcu}: DRS profile {name} has id {pid} in the settings' "
                f"drs_profiles, efsmi lists id {found.id}; creating it would cut another profile"
            )
    named = {n.strip().lower() for n in configured}
    for p in listed:
        if p.name not in named:
            out.append(
                f"Enflame GCU {gcu}: efsmi lists DRS profile {p.name} (id {p.id}), which the "
                "settings' drs_profiles do not name; it is not offered"
            )
    return out


@dataclass
class ProfileSource:
    """The profiles of each DRS GCU of one node agent (kept in its ``ctx.state``)."""

    config: EnflameConfig
    kept: dict[tuple[int, str], Layout] = field(default_factory=dict)

    @property
    def overridden(self) -> bool:
        """True when the settings name ``drs_profiles`` themselves (not the defaults)."""
        return "drs_profiles" in self.config.model_fields_set

    def of(self, gcu: int, uuid: str) -> Layout:
        """GCU *gcu*'s layout (*uuid* tells a replaced GCU at the same index apart)."""
        hit = self.kept.get((gcu, uuid))
        if hit is not None:
            return hit
        fallback = settings_layout(self.config)
        who = f"{gcu} ({uuid})" if uuid else str(gcu)
        if shutil.which(self.config.efsmi_path) is None:
            # Only a node with drs_cut: false starts without efsmi; it books by the settings.
            return fallback
        try:
            listed = read(Efsmi(self.config.efsmi_path, self.config.efsmi_timeout_s), gcu)
        except EfsmiError as exc:
            log.warning(
                "Enflame GCU %s: its DRS profiles could not be read from efsmi, so the "
                "settings' drs_profiles are published for it (read again at the next "
                "detection): %s",
                who,
                exc,
            )
            return fallback
        if not listed:
            log.warning(
                "Enflame GCU %s: `efsmi -i %d --drs --list-profile` lists no DRS profile; the "
                "settings' drs_profiles are published for it",
                who,
                gcu,
            )
            return fallback
        if self.overridden:
            for line in mismatches(who, self.config.drs_profiles, listed):
                log.warning("%s (the settings override efsmi)", line)
            found = fallback
        else:
            found = self._from_efsmi(who, listed)
        if len(self.kept) >= MAX_KEPT:
            self.kept.clear()
        self.kept[(gcu, uuid)] = found
        return found

    def _from_efsmi(self, who: str, listed: list[ListedProfile]) -> Layout:
        named = {p.name: p.id for p in listed}
        largest = max((p.slices for p in drs.profiles(named)), default=1)
        capacity = self.config.drs_capacity
        if capacity is not None and capacity < largest:
            log.warning(
                "Enflame GCU %s: drs_capacity %d of the settings is below the %d slices of "
                "its largest DRS profile efsmi lists; %d is used",
                who,
                capacity,
                largest,
                largest,
            )
        counts = {p.name: p.count for p in listed}
        return layout(named, capacity, counts, source="efsmi")


#: Where the node agent keeps its :class:`ProfileSource` (``ctx.state``).
STATE_KEY: Final = "enflame.drs-profiles"


def source(state: dict[str, object], config: EnflameConfig) -> ProfileSource:
    """The agent's source of profiles, made anew when its settings changed."""
    found = state.get(STATE_KEY)
    if isinstance(found, ProfileSource) and found.config is config:
        return found
    made = ProfileSource(config)
    state[STATE_KEY] = made
    return made
