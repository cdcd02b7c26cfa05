"""How the webhook compares a pod's paths, capabilities and envFrom prefixes with what it guards.

Why a module of its own: these are the comparisons an attacker probes. Paths are compared
the way the kubelet and the container runtime will resolve them (``/etc/``, ``//etc``,
``/etc/../etc`` and a relative ``etc`` all name ``/etc``), capabilities the way the runtime
reads them (``sys_admin``, ``SYS_ADMIN`` and ``CAP_SYS_ADMIN`` are one capability), and an
``envFrom`` prefix by every name it could form, since the ConfigMap's or Secret's keys are
not in the pod and may change after admission. Pure functions, no I/O.
"""

from __future__ import annotations

import fnmatch
import posixpath

_GLOB = "*?["


def normalize_path(path: str) -> str:
    """*path* as the runtime resolves it in the container's (or node's) root: absolute, with
    no ``.``, ``..``, repeated or trailing slashes."""
    # posixpath keeps a leading "//" (POSIX leaves it implementation-defined); Linux treats
    # it as "/", so strip every leading slash first. A relative path is taken from the root,
    # which is what the runtime does with a relative mountPath.
    return posixpath.normpath("/" + path.lstrip("/"))


def is_within(path: str, root: str) -> bool:
    """Whether normalised *path* is *root* or below it."""
    return path == root or root == "/" or path.startswith(root + "/")


def relation(path: str, guarded: str) -> str | None:
    """How a mount at normalised *path* touches *guarded*: ``"over"`` (the same path),
    ``"above"`` (it would hide *guarded*), ``"inside"``, or ``None`` (apart)."""
    if path == guarded:
        return "over"
    if is_within(guarded, path):
        return "above"
    if is_within(path, guarded):
        return "inside"
    return None


def holds_device(host_path: str, pattern: str) -> bool:
    """Whether a hostPath volume of normalised *host_path* gives access to a device node that
    matches *pattern* (a shell pattern such as ``/dev/nvidia*``): the path is such a node or
    lies below one, or it is a directory that holds them (``/dev``, ``/``)."""
    # fnmatch's '*' also matches '/', so /dev/nvidia-caps/nvidia-cap1 matches /dev/nvidia*.
    if fnmatch.fnmatchcase(host_path, pattern):
        return True
    cut = min((pattern.find(c) for c in _GLOB if c in pattern), default=-1)
    if cut < 0:
        return relation(host_path, pattern) is not None
    # The directory every match lives in: "/dev" for "/dev/nvidia*".
    parent = posixpath.dirname(pattern[:cut]) or "/"
    return is_within(parent, host_path)


def capability_name(raw: object) -> str:
    """A capability as the container runtimes read it: upper case, without ``CAP_``."""
    return str(raw).strip().upper().removeprefix("CAP_")


def prefix_reaches(prefix: str, pattern: str) -> bool:
    """Whether an ``envFrom`` *prefix* could form a variable matched by *pattern*.

    The keys come from a ConfigMap or Secret the webhook does not see, so any key may follow
    the prefix: it is refused when it begins a guarded name (``CUDA_DISABLE_`` of
    ``CUDA_DISABLE_CONTROL``), equals one, or extends into a wildcard pattern
    (``CUDA_DEVICE_MEMORY_LIMIT_0_`` under ``CUDA_DEVICE_MEMORY_LIMIT*``).
    """
    cut = min((pattern.find(c) for c in _GLOB if c in pattern), default=-1)
    if cut < 0:
        return pattern.startswith(prefix)
    stem = pattern[:cut]
    # Conservative for patterns with a glob in the middle: anything past the stem may match.
    return stem.startswith(prefix) or prefix.startswith(stem)
