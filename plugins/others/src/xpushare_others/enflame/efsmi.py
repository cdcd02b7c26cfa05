"""Enflame's ``efsmi`` tool, driven as Enflame's own device plugin drives it to cut DRS instances.

Why a command and not EFML: EFML publishes no DRS call; Enflame's gcushare device plugin
creates and destroys a GCU's DRS instances by running ``efsmi`` (``-i <index> --drs on``,
``--drs --create-instance <profile id>``, ``-L``, ``--drs --destroy-instance <instance id>``,
``--drs off``) and reads the profiles a GCU offers (``-i <index> --drs --list-profile``), and
so does this module, with the same arguments. The command runs without a
shell (argv only), under a time limit, and at most :data:`MAX_OUTPUT` bytes of what it prints
are read: efsmi is the node's, but its output is still parsed as untrusted text.

Output rows are located as Enflame's plugin locates them: a line holding a profile name
(``<slices>g.<memory>gb``); the table's ``|`` borders are dropped and the fields read around
that name (``-L``: GCU index, profile, instance id, instance UUID; ``--list-profile``: a
first column, profile, profile id, how many instances of it the GCU holds, memory, SIPs, as
Enflame's ``ListProfile`` reads them). A profile listing is a GCU's whole offer, so unlike the
instance listing it is refused, not cut short, when it is larger than :data:`MAX_LISTING` or
holds a profile row that does not parse.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import IO, Final

#: Most bytes of one efsmi run that are kept (a GCU lists a handful of instances); the rest
#: is read and dropped, so a runaway efsmi neither blocks on a full pipe nor fills memory.
MAX_OUTPUT: Final = 1 << 20
_CHUNK: Final = 1 << 16
#: Most rows taken from one listing: a GCU has at most its slice count of instances.
MAX_ROWS: Final = 256
#: Enflame's ProfileNameRegExp (gcushare-device-plugin ``pkg/consts``), bounded.
_PROFILE: Final = re.compile(r"^[0-9]{1,4}g\.[0-9]{1,6}gb$")
_INSTANCE_ID: Final = re.compile(r"^[0-9]{1,9}$")
_UUID: Final = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]{0,63}$")
#: Most bytes of one profile listing: a handful of rows of a few dozen characters each; 64 KiB
#: is hundreds of times that, and anything larger is not efsmi's table.
MAX_LISTING: Final = 64 << 10
#: Most profiles one GCU may list (the settings' bound, ``config.MAX_PROFILES``).
MAX_LISTED_PROFILES: Final = 32
#: Most instances of one profile a GCU may hold: a GCU has at most a few dozen slices.
MAX_INSTANCE_COUNT: Final = 1024


class EfsmiError(RuntimeError):
    """efsmi is missing, failed, timed out or printed what is not its table."""


class EfsmiFailed(EfsmiError):
    """efsmi ran and exited with a failure status (e.g. DRS is off on the GCU)."""


@dataclass(frozen=True, slots=True)
class Instance:
    """One DRS instance of one GCU, as ``efsmi -i <index> -L`` lists it."""

    gcu: int
    profile: str
    id: str
    uuid: str


@dataclass(frozen=True, slots=True)
class ListedProfile:
    """One DRS profile of one GCU, as ``efsmi -i <index> --drs --list-profile`` lists it."""

    name: str
    id: str
    #: How many instances of the profile the GCU holds at once (Enflame's ``InstanceCount``).
    count: int


def parse_profiles(text: str, gcu: int) -> list[ListedProfile]:
    """The profiles of a ``--list-profile`` output of GCU *gcu*.

    Lines without a profile name (borders, headers) are skipped, as Enflame's plugin skips
    them; a line with one must carry a numeric id and count after it.

    :raises EfsmiError: a profile row does not parse, a profile is listed twice, or there are
        more than :data:`MAX_LISTED_PROFILES`; the message names the GCU and the row.
    """
    out: dict[str, ListedProfile] = {}
    for line in text.splitlines():
        fields = line.replace("|", " ").split()
        at = next((i for i, f in enumerate(fields) if _PROFILE.match(f.lower())), None)
        if at is None:
            continue
        shown = " ".join(fields)[:120]
        if len(fields) < at + 3:
            raise EfsmiError(
                f"efsmi's DRS profile row of GCU {gcu} has no profile id and instance count "
                f"after the name: {shown!r}"
            )
        name, pid, count = fields[at].lower(), fields[at + 1], fields[at + 2]
        if not _INSTANCE_ID.match(pid):
            raise EfsmiError(
                f"efsmi lists a DRS profile id of GCU {gcu} that is not a number: {shown!r}"
            )
        if not (count.isdigit() and 1 <= int(count) <= MAX_INSTANCE_COUNT):
            raise EfsmiError(
                f"efsmi lists a DRS instance count of GCU {gcu} that is not 1 to "
                f"{MAX_INSTANCE_COUNT}: {shown!r}"
            )
        if name in out:
            raise EfsmiError(f"efsmi lists DRS profile {name} of GCU {gcu} twice")
        if len(out) >= MAX_LISTED_PROFILES:
            raise EfsmiError(
                f"efsmi lists more than {MAX_LISTED_PROFILES} DRS profiles for GCU {gcu}"
            )
        out[name] = ListedProfile(name, pid, int(count))
    return list(out.values())


def parse_instances(text: str) -> list[Instance]:
    """The instances of ``efsmi -L`` output; rows that do not parse are skipped."""
    out: list[Instance] = []
    for line in text.splitlines():
        if len(out) >= MAX_ROWS:
            break
        fields = line.replace("|", " ").split()
        at = next((i for i, f in enumerate(fields) if _PROFILE.match(f)), None)
        if at is None or at == 0 or len(fields) < at + 3:
            continue
        gcu, iid, uuid = fields[at - 1], fields[at + 1], fields[at + 2]
        if not (gcu.isdigit() and len(gcu) <= 4 and _INSTANCE_ID.match(iid) and _UUID.match(uuid)):
            continue
        out.append(Instance(int(gcu), fields[at], iid, uuid))
    return out


def _read_bounded(stream: IO[bytes], kept: bytearray, limit: int, seen: list[int]) -> None:
    """Keep the first *limit* bytes of *stream*; ``seen[0]`` counts all it printed."""
    while chunk := stream.read(_CHUNK):
        seen[0] += len(chunk)
        room = limit - len(kept)
        if room > 0:
            kept += chunk[:room]


class Efsmi:
    """``efsmi`` at *path* (a name is looked up in ``PATH`` at each run)."""

    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self.timeout_s = timeout_s

    def _binary(self) -> str:
        found = shutil.which(self.path)
        if found is None:
            raise EfsmiError(
                f"Enflame's efsmi ({self.path!r}) is not on the node agent's PATH; mount the "
                "host's efsmi into the agent or set the enflame option efsmi_path"
            )
        return found

    def run(self, *args: str, limit: int | None = None) -> str:
        """What efsmi printed (its first :data:`MAX_OUTPUT` bytes); with *limit*, output
        longer than *limit* bytes is refused instead of cut short."""
        argv = [self._binary(), *args]
        shown = " ".join(["efsmi", *args])
        kept = bytearray()
        seen = [0]
        keep = MAX_OUTPUT if limit is None else min(limit, MAX_OUTPUT)
        try:
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            raise EfsmiError(f"`{shown}` could not be run: {exc}") from exc
        assert proc.stdout is not None  # stdout=PIPE
        reader = threading.Thread(
            target=_read_bounded, args=(proc.stdout, kept, keep, seen), daemon=True
        )
        reader.start()
        try:
            code = proc.wait(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise EfsmiError(
                f"`{shown}` did not finish within {self.timeout_s:g} s; check the GCU and its "
                "driver with efsmi by hand"
            ) from None
        finally:
            reader.join(timeout=self.timeout_s)
            proc.stdout.close()
        text = kept.decode("utf-8", "replace")
        if code != 0:
            tail = text.strip().splitlines()[-1:] or ["(no output)"]
            raise EfsmiFailed(f"`{shown}` failed with status {code}: {tail[0][:200]}")
        if limit is not None and seen[0] > limit:
            raise EfsmiError(
                f"`{shown}` printed {seen[0]} bytes, more than the {limit} its table can take; "
                "run it by hand and check the efsmi version"
            )
        return text

    def drs_on(self, gcu: int) -> None:
        self.run("-i", str(gcu), "--drs", "on")

    def drs_off(self, gcu: int) -> None:
        self.run("-i", str(gcu), "--drs", "off")

    def instances(self, gcu: int) -> list[Instance]:
        return [i for i in parse_instances(self.run("-i", str(gcu), "-L")) if i.gcu == gcu]

    def profiles(self, gcu: int) -> list[ListedProfile]:
        text = self.run("-i", str(gcu), "--drs", "--list-profile", limit=MAX_LISTING)
        return parse_profiles(text, gcu)

    def create(self, gcu: int, profile_id: str) -> None:
        if not _INSTANCE_ID.match(profile_id):
            raise EfsmiError(f"DRS profile id {profile_id[:20]!r} of GCU {gcu} is not a number")
        self.run("-i", str(gcu), "--drs", "--create-instance", profile_id)

    def destroy(self, gcu: int, instance_id: str) -> None:
        if not _INSTANCE_ID.match(instance_id):
            raise EfsmiError(f"DRS instance id {instance_id[:20]!r} of GCU {gcu} is not a number")
        self.run("-i", str(gcu), "--drs", "--destroy-instance", instance_id)
