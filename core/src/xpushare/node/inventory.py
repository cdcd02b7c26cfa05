"""Keeping the node's inventory annotations and labels what the agent detected.

The scheduler reads each vendor's devices from the node annotation
``xpushare.io/inventory-<vendor>`` (codec format, with a state: ``ok``, ``no-devices``, or
``error`` keeping the last good devices), and people and node selectors read labels:

===================================  ==============================================
``xpushare.io/<vendor>.present``     ``true`` while the vendor has devices here
``xpushare.io/<vendor>.product``     the model most of its devices are (sanitised)
``xpushare.io/<vendor>.count``       how many devices
``xpushare.io/<vendor>.memory-mib``  memory of its smallest device, MiB
===================================  ==============================================

Why reconcile instead of write-once: anyone can delete an annotation or a label, so the
publisher compares what the node carries with what it should carry, on every change and
every ``reconcile_interval_s``, and patches only the difference (one JSON merge patch).
The agent owns every ``xpushare.io/inventory-*`` annotation and every label with one of the
suffixes above on its node, so those of a vendor that is no longer installed are removed.

The agent writes nothing to the node's handoff Lease: an expired handoff is free to the
scheduler and ignored by Allocate, so it repairs itself without a write (DESIGN.md §6), and
the scheduler replaces it at its next bind on the node. The agent's account may only read
Leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import Counter
from typing import TYPE_CHECKING

from xpushare.codec import (
    AGENT_MODE_KEY,
    INVENTORY_KEY_PREFIX,
    encode_inventory,
    inventory_key,
)
from xpushare.errors import CodecError
from xpushare.node.kube import KubeError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from xpushare.node.devices import DeviceView, VendorDevices
    from xpushare.node.kube import JsonObject, NodeKube

log = logging.getLogger(__name__)

LABEL_PREFIX = "xpushare.io/"
LABEL_SUFFIXES = (".present", ".product", ".count", ".memory-mib")

#: Kubernetes label values: at most 63 characters, alphanumeric at both ends, ``-_.`` inside
#: (research/k8s-apis.md §7.2); the name part of a key has the same length limit.
LABEL_MAX = 63
_LABEL_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_OUR_LABEL = re.compile(
    r"^xpushare\.io/[a-z0-9]([-a-z0-9]*[a-z0-9])?\.(present|product|count|memory-mib)$"
)

#: Wait after a failed API call before the next attempt, doubling up to the interval.
RETRY_FIRST_S = 1.0


def label_value(text: str) -> str:
    """*text* as a valid label value: bad characters become ``-``, at most 63 characters."""
    value = _LABEL_BAD.sub("-", text)[:LABEL_MAX]
    return value.strip("-_.")


def vendor_labels(vendor: str, view: DeviceView) -> dict[str, str | None]:
    """The labels of one vendor (``None``: the label must not be there)."""
    keys = [f"{LABEL_PREFIX}{vendor}{suffix}" for suffix in LABEL_SUFFIXES]
    if any(len(k) - len(LABEL_PREFIX) > LABEL_MAX for k in keys):
        log.warning("vendor name %r is too long for node labels; not labelling", vendor)
        return {}
    if not view.devices:
        return dict.fromkeys(keys)
    models = Counter(d.model for d in view.devices)
    # The most common model; ties broken by name so the label does not flap.
    product = min(models, key=lambda m: (-models[m], m))
    values = [
        "true",
        label_value(product) or "unknown",
        str(len(view.devices)),
        str(min(d.memory_mib for d in view.devices)),
    ]
    return dict(zip(keys, values, strict=True))


def vendor_annotation(vendor: str, node: str, view: DeviceView) -> str | None:
    """The inventory annotation of one vendor (``None``: remove it)."""
    state = view.state
    if state == "starting" or state == "inactive":
        return None
    try:
        return encode_inventory(
            vendor, node, view.devices, state=state, message=view.message[:1000]
        )
    except CodecError as exc:
        log.error("vendor %s: cannot encode its inventory: %s", vendor, exc)
        return encode_inventory(vendor, node, view.devices[:0], state="error", message=str(exc))


class InventoryPublisher:
    """Reconciles the node's annotations and labels with the vendors' device views."""

    def __init__(
        self,
        *,
        kube: NodeKube,
        vendors: Mapping[str, VendorDevices],
        interval_s: float,
        on_error: Callable[[], None] | None = None,
        mode: str = "device-plugin",
    ) -> None:
        self.kube = kube
        #: How kubelet gets this node's devices, announced for the extender (AGENT_MODE_KEY).
        self.mode = mode
        self._on_error = on_error or (lambda: None)
        self.node = kube.node_name
        self._vendors = vendors
        self.interval_s = interval_s
        self._poke = asyncio.Event()
        self.published = 0
        self.patches = 0
        self.errors = 0
        self.last_error = ""

    def poke(self) -> None:
        """Reconcile soon (something changed)."""
        self._poke.set()

    def desired(self) -> tuple[dict[str, str | None], dict[str, str | None]]:
        annotations: dict[str, str | None] = {AGENT_MODE_KEY: self.mode}
        labels: dict[str, str | None] = {}
        for vendor, devices in self._vendors.items():
            view = devices.view
            annotations[inventory_key(vendor)] = vendor_annotation(vendor, self.node, view)
            # In state "error" the view still holds the last good devices, so their labels
            # stay as they were.
            labels.update(vendor_labels(vendor, view))
        return annotations, labels

    def _patch(self, node: JsonObject) -> tuple[JsonObject, bool]:
        meta = node.get("metadata") or {}
        have_annotations = meta.get("annotations") or {}
        have_labels = meta.get("labels") or {}
        want_annotations, want_labels = self.desired()
        for key in have_annotations:
            if key.startswith(INVENTORY_KEY_PREFIX) and key not in want_annotations:
                want_annotations[key] = None  # a vendor no longer installed
        for key in have_labels:
            if _OUR_LABEL.match(key) and key not in want_labels:
                want_labels[key] = None
        annotations = {k: v for k, v in want_annotations.items() if have_annotations.get(k) != v}
        labels = {k: v for k, v in want_labels.items() if have_labels.get(k) != v}
        patch: JsonObject = {"metadata": {}}
        if annotations:
            patch["metadata"]["annotations"] = annotations
        if labels:
            patch["metadata"]["labels"] = labels
        return patch, bool(annotations or labels)

    async def reconcile(self) -> bool:
        """One pass; returns whether the node was patched. Raises :class:`KubeError`."""
        node = await self.kube.get_node()
        patch, needed = self._patch(node)
        if needed:
            await self.kube.patch_node(patch)
            self.patches += 1
            log.info("node %s: published inventory and labels", self.node)
        self.published += 1
        return needed

    async def run(self) -> None:
        """Reconcile on every poke and every interval, until cancelled; API errors retry."""
        backoff = RETRY_FIRST_S
        while True:
            self._poke.clear()
            try:
                await self.reconcile()
            except KubeError as exc:
                self.errors += 1
                self._on_error()
                self.last_error = str(exc)
                log.warning("node %s: cannot publish the inventory: %s", self.node, exc)
                wait = min(backoff, self.interval_s)
                backoff *= 2
            else:
                self.last_error = ""
                backoff = RETRY_FIRST_S
                wait = self.interval_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._poke.wait()
