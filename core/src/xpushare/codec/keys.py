"""Every annotation key the codec reads or writes, and the size limits of their values.

Why one module: the keys are a wire contract shared by the scheduler, the node agent, the
vendor plugins and the HAMi components a cluster may still run. Keeping them together makes
a typo a one-place fix and lets a reviewer see the whole contract at once.

HAMi's keys come from research/hami-protocol.md §2.1 (NVIDIA) and §8.1 (other vendors).
HAMi names a vendor by its ``CommonWord()`` (``NVIDIA``, ``DCU``, ...); xpushare names it by
the plugin's entry-point name (``nvidia``, ``hygon``, ...). :data:`HAMI_KEYS` maps ours to
theirs.
"""

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from xpushare.errors import CodecError

#: Prefix of every annotation xpushare writes.
PREFIX = "xpushare.io/"

#: Node annotation holding one vendor's inventory; the vendor name follows the dash.
INVENTORY_KEY_PREFIX = PREFIX + "inventory-"

#: Node annotation in which the node agent says how kubelet gets its devices: ``dra``
#: (ResourceSlices and the kubelet DRA plugin) or ``device-plugin``. The extender reads it:
#: on a DRA node kube-scheduler's allocator books devices through claims, so a bind there
#: writes no handoff and no assignment (docs/dra.md).
AGENT_MODE_KEY = PREFIX + "agent-mode"

#: Pod annotation written at bind: which devices each container got.
ASSIGNMENT_KEY = PREFIX + "assignment"

#: Annotation of a node's handoff Lease naming the pod the node's device plugins serve
#: between bind and Allocate (DESIGN.md §6).
HANDOFF_KEY = PREFIX + "handoff"

#: Annotation of a node's handoff Lease holding the fencing token (the scheduler's leadership
#: term) of the last scheduler replica that wrote it: a replica of an older term refuses to
#: write the handoff, so a deposed leader can never commit a decision there
#: (docs/scheduler.md, "Why no interleaving can double-book").
TERM_KEY = PREFIX + "scheduler-term"

#: Label of every handoff Lease (its value is :data:`HANDOFF_LEASE_ROLE`): the scheduler
#: watches the release namespace's Leases with this selector, and nothing else.
HANDOFF_LEASE_LABEL = PREFIX + "role"
HANDOFF_LEASE_ROLE = "handoff"
#: Where the handoff Leases live when nothing says (the scheduler's ``bind.handoff_namespace``,
#: the node agent's ``--handoff-namespace``): the leader Lease's default namespace too. The
#: chart sets both to the release's namespace.
DEFAULT_HANDOFF_NAMESPACE = "kube-system"

#: Why the handoff lives in a Lease of its own and not on the Node: every kube-scheduler,
#: kube-controller-manager and CNI agent watches every Node, so two Node writes per bind were
#: sent to each of them (13.7 node watch events, 43.8 KiB, a pod; bench_realcluster at 1,000
#: nodes, docs/benchmarks.md "Session 16"). Only our scheduler and the node agents read this.
_LEASE_PREFIX = "handoff."
#: A Lease's name is a DNS subdomain of at most 253 characters, as a Node's is.
_MAX_NAME = 253


def handoff_lease_name(node: str) -> str:
    """The name of *node*'s handoff Lease: ``handoff.<node>``, or a digest for a node name
    too long to carry the prefix (both are valid Lease names for every valid node name)."""
    name = _LEASE_PREFIX + node
    if len(name) <= _MAX_NAME:
        return name
    return "handoff-" + hashlib.sha256(node.encode()).hexdigest()


#: Pod annotation a newer leader writes on a pod whose bind an older leader left in flight:
#: writing it changes the pod's resourceVersion, which the old leader's Binding carries as a
#: precondition, so that Binding is refused by the API server.
FENCED_KEY = PREFIX + "fenced-by-term"

#: The largest term: the Lease's ``leaseTransitions`` it comes from is an int32.
MAX_TERM = 2**31 - 1

#: Kubernetes caps the sum of len(key) + len(value) over all annotations of one object at
#: 262144 bytes (apimachinery objectmeta validation, TotalAnnotationSizeLimitB;
#: research/k8s-apis.md). A value longer than this cannot have come from the API server, so
#: readers refuse it before parsing anything.
KUBERNETES_ANNOTATIONS_LIMIT_BYTES = 256 * 1024

#: The most one xpushare annotation value may take: a quarter of the object's total, so a node
#: can carry the inventories of a few vendors next to other tools' annotations (and
#: kubectl's last-applied-configuration) without the API server refusing the whole update.
#: A 16-GPU node with MIG profiles and full NVLink topology encodes to well under 32 KiB.
MAX_VALUE_BYTES = 64 * 1024

# The name part of an annotation key is at most 63 characters (k8s qualified names), so a
# vendor name in an inventory key can have 63 - len("inventory-") of them.
_MAX_VENDOR_IN_KEY = 63 - len("inventory-")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def inventory_key(vendor: str) -> str:
    """The node annotation key of *vendor*'s inventory, e.g. ``xpushare.io/inventory-nvidia``."""
    if (
        not isinstance(vendor, str)
        or not _DNS_LABEL.match(vendor)
        or len(vendor) > _MAX_VENDOR_IN_KEY
    ):
        raise CodecError(
            f"vendor name {vendor!r} cannot name an inventory annotation: it must be a "
            f"lower-case DNS label of at most {_MAX_VENDOR_IN_KEY} characters; fix the vendor "
            "plugin's entry-point name"
        )
    return INVENTORY_KEY_PREFIX + vendor


def vendor_of_inventory_key(key: str) -> str | None:
    """The vendor named by an inventory key, or None when *key* is not one.

    Lets the scheduler pick its inventories out of a node's annotations without knowing
    which vendors exist.
    """
    if not isinstance(key, str) or not key.startswith(INVENTORY_KEY_PREFIX):
        return None
    vendor = key[len(INVENTORY_KEY_PREFIX) :]
    if not _DNS_LABEL.match(vendor) or len(vendor) > _MAX_VENDOR_IN_KEY:
        return None
    return vendor


# --- HAMi -------------------------------------------------------------------------------

#: How a HAMi backend encodes its node inventory: a JSON list of DeviceInfo, the legacy
#: colon/comma string (research §2.2), or a format of the vendor's own that
#: :func:`xpushare.codec.decode_hami_node_devices` does not read.
HamiRegisterFormat = Literal["json", "legacy", "foreign"]


@dataclass(frozen=True, slots=True)
class HamiKeys:
    """The annotations one HAMi backend writes.

    ``register`` is None for backends whose inventory HAMi synthesises from the node's
    capacity (no annotation to read); ``to_allocate`` is None for backends that write only
    the "allocated" string. ``allocated`` is the pod device string (research §2.6) that
    HAMi treats as the source of truth for usage, so it is what a migration counts.
    """

    vendor: str
    hami_type: str
    register: str | None
    register_format: HamiRegisterFormat | None
    allocated: str
    to_allocate: str | None


def _pod_keys(word: str) -> tuple[str, str]:
    return f"hami.io/{word}-devices-allocated", f"hami.io/{word}-devices-to-allocate"


def _fixed() -> dict[str, HamiKeys]:
    # research/hami-protocol.md §2.1 (NVIDIA) and §8.1 (the others), table order.
    rows: list[HamiKeys] = [
        HamiKeys(
            "nvidia",
            "NVIDIA",
            "hami.io/node-nvidia-register",
            "json",  # legacy string before HAMi v2.8; the reader detects either
            "hami.io/vgpu-devices-allocated",
            "hami.io/vgpu-devices-to-allocate",
        ),
        HamiKeys("amd", "AMD", "hami.io/node-amd-register", "json", *_pod_keys("amd")),
        HamiKeys("cambricon", "MLU", None, None, *_pod_keys("cambricon-mlu")),
        HamiKeys("hygon", "DCU", "hami.io/node-dcu-register", "legacy", *_pod_keys("dcu")),
        HamiKeys(
            "mthreads", "Mthreads", None, None, "hami.io/mthreads-vgpu-devices-allocated", None
        ),
        HamiKeys("metax", "Metax-GPU", None, None, *_pod_keys("metax-gpu")),
        HamiKeys(
            "metax-sgpu",
            "Metax-SGPU",
            "metax-tech.com/node-gpu-devices",
            "foreign",
            *_pod_keys("metax-sgpu"),
        ),
        HamiKeys("kunlun", "kunlun", None, None, "hami.io/kunlun-allocated", None),
        HamiKeys("kunlun-vxpu", "XPU", "hami.io/node-register-xpu", "json", *_pod_keys("xpu")),
        HamiKeys("enflame", "GCU", None, None, *_pod_keys("enflame-gcu")),
        HamiKeys(
            "enflame-drs",
            "Enflame",
            "enflame.com/gcu-drs-capacity",
            "foreign",
            "hami.io/enflame-vgpu-devices-allocated",
            None,
        ),
        HamiKeys(
            "awsneuron", "AWSNeuron", None, None, "hami.io/aws-neuron-devices-allocated", None
        ),
        HamiKeys("vastai", "Vastai", "hami.io/node-va-register", "json", *_pod_keys("Vastai")),
        HamiKeys("biren", "Biren", "hami.io/node-biren-register", "json", *_pod_keys("Biren")),
    ]
    return {row.vendor: row for row in rows}


#: HAMi's keys for every backend with fixed keys, by xpushare vendor name.
HAMI_KEYS: Mapping[str, HamiKeys] = MappingProxyType(_fixed())

#: Backends whose keys embed a chip name (HAMi runs one backend per configured chip), so
#: :func:`hami_keys` needs the chip.
HAMI_CHIP_VENDORS = frozenset({"ascend", "iluvatar"})

#: Iluvatar chips HAMi configures by default (research §8.1). Ascend chips come from the
#: cluster's ``vnpus.configs`` (e.g. ``Ascend910B3``, ``Ascend310P``), so none are listed.
HAMI_ILUVATAR_CHIPS = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")

# A chip name becomes part of an annotation key's name segment.
_CHIP = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,40}[A-Za-z0-9])?$")


def hami_keys(vendor: str, chip: str | None = None) -> HamiKeys:
    """HAMi's annotation keys for *vendor* (and *chip*, for Ascend and Iluvatar)."""
    if not isinstance(vendor, str):
        raise CodecError(f"a vendor name must be a string, got {type(vendor).__name__}")
    if vendor in HAMI_CHIP_VENDORS:
        if chip is None or not isinstance(chip, str) or not _CHIP.match(chip):
            raise CodecError(
                f"HAMi keys of vendor {vendor!r} embed a chip name (HAMi's CommonWord, e.g. "
                f"{'Ascend910B3' if vendor == 'ascend' else 'MR-V100'}); got {chip!r}: pass "
                "the chip configured in HAMi's device config"
            )
        allocated, to_allocate = _pod_keys(chip)
        if vendor == "ascend":
            return HamiKeys(
                vendor, chip, f"hami.io/node-register-{chip}", "json", allocated, to_allocate
            )
        return HamiKeys(
            vendor, chip, f"hami.io/node-{chip}-register", "legacy", allocated, to_allocate
        )
    keys = HAMI_KEYS.get(vendor)
    if keys is not None and chip is not None:
        raise CodecError(
            f"HAMi keys of vendor {vendor!r} do not depend on a chip; got chip {chip!r}: "
            "call hami_keys without one"
        )
    if keys is None:
        known = ", ".join(sorted([*HAMI_KEYS, *HAMI_CHIP_VENDORS]))
        raise CodecError(
            f"no HAMi annotation keys are known for vendor {vendor!r}; known vendors: {known}"
        )
    return keys


def parse_term(value: str | None) -> int | None:
    """The term in a :data:`TERM_KEY` value; ``None`` when absent or malformed.

    Read with bounded cost (at most ten digits are ever converted): the annotation is on a
    node, which any holder of node patch rights can write.
    """
    if value is None or not 0 < len(value) <= 10 or not value.isascii() or not value.isdigit():
        return None
    term = int(value)
    return term if term <= MAX_TERM else None
