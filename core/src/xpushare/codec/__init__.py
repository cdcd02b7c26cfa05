"""Annotation codec: xpushare's own annotations, and readers/writers of HAMi's.

Why a package of its own: annotations are the only state xpushare's processes share through
Kubernetes, and they are written by other programs too (older and newer xpushare releases,
HAMi during a migration, people). Every value is parsed defensively here, so the rest of
xpushare sees either a validated model or a :class:`~xpushare.errors.CodecError` that names
the annotation, the object and what is wrong, and never any other exception.

Our formats are compact JSON with a format version ``v`` (DESIGN.md §5); HAMi's are described
in research/hami-protocol.md §2. This package imports only ``xpushare.models``,
``xpushare.errors``, pydantic and the standard library.
"""

from xpushare.codec._safejson import FORMAT_VERSION
from xpushare.codec.assignment import decode_assignment, encode_assignment
from xpushare.codec.hami_node import decode_hami_node_devices
from xpushare.codec.hami_pod import (
    HamiSlice,
    decode_hami_pod_devices,
    encode_hami_pod_devices,
    hami_pod_assignment,
)
from xpushare.codec.handoff import Handoff, decode_handoff, encode_handoff
from xpushare.codec.inventory import Inventory, InventoryState, decode_inventory, encode_inventory
from xpushare.codec.keys import (
    AGENT_MODE_KEY,
    ASSIGNMENT_KEY,
    DEFAULT_HANDOFF_NAMESPACE,
    FENCED_KEY,
    HAMI_CHIP_VENDORS,
    HAMI_ILUVATAR_CHIPS,
    HAMI_KEYS,
    HANDOFF_KEY,
    HANDOFF_LEASE_LABEL,
    HANDOFF_LEASE_ROLE,
    INVENTORY_KEY_PREFIX,
    KUBERNETES_ANNOTATIONS_LIMIT_BYTES,
    MAX_TERM,
    MAX_VALUE_BYTES,
    TERM_KEY,
    HamiKeys,
    hami_keys,
    handoff_lease_name,
    inventory_key,
    parse_term,
    vendor_of_inventory_key,
)

__all__ = [
    "AGENT_MODE_KEY",
    "ASSIGNMENT_KEY",
    "DEFAULT_HANDOFF_NAMESPACE",
    "FENCED_KEY",
    "FORMAT_VERSION",
    "HAMI_CHIP_VENDORS",
    "HAMI_ILUVATAR_CHIPS",
    "HAMI_KEYS",
    "HANDOFF_KEY",
    "HANDOFF_LEASE_LABEL",
    "HANDOFF_LEASE_ROLE",
    "INVENTORY_KEY_PREFIX",
    "KUBERNETES_ANNOTATIONS_LIMIT_BYTES",
    "MAX_TERM",
    "MAX_VALUE_BYTES",
    "TERM_KEY",
    "HamiKeys",
    "HamiSlice",
    "Handoff",
    "Inventory",
    "InventoryState",
    "decode_assignment",
    "decode_hami_node_devices",
    "decode_hami_pod_devices",
    "decode_handoff",
    "decode_inventory",
    "encode_assignment",
    "encode_hami_pod_devices",
    "encode_handoff",
    "encode_inventory",
    "hami_keys",
    "hami_pod_assignment",
    "handoff_lease_name",
    "inventory_key",
    "parse_term",
    "vendor_of_inventory_key",
]
