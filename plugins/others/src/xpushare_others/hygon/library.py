"""A ctypes binding of the ROCm SMI build that Hygon ships with hy-smi (``librocm_smi64.so``).

Why our own binding: Hygon publishes no Python binding (python-ecosystem.md §3.3). The
library keeps AMD's ``rsmi_*`` names, so it is loaded isolated (RTLD_LOCAL | RTLD_DEEPBIND,
see :mod:`xpushare_others.common.loading`): a node agent that also drives AMD GPUs must never
have one vendor's calls land in the other's library.

Only the functions the plugin calls are declared, with ROCm SMI's signatures
(``rocm_smi.h``): every one returns an ``rsmi_status_t``. Used only from node-side hooks,
which run on the vendor's library thread.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char_p, c_int32, c_int64, c_size_t, c_uint32, c_uint64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare.errors import VendorUnavailable
from xpushare_others.common import loading
from xpushare_others.hygon.config import VENDOR, HygonConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary, NodeContext

#: File names of the library, as hy-smi's DTK installs it (gpustack-devices.md §1.3).
SONAMES: Final = ("librocm_smi64.so", "librocm_smi64.so.2", "librocm_smi64.so.1")

# rsmi_status_t (rocm_smi.h).
SUCCESS: Final = 0
NOT_SUPPORTED: Final = 2
STATUS_NAMES: Final = {
    1: "RSMI_STATUS_INVALID_ARGS",
    2: "RSMI_STATUS_NOT_SUPPORTED",
    3: "RSMI_STATUS_FILE_ERROR",
    4: "RSMI_STATUS_PERMISSION",
    5: "RSMI_STATUS_OUT_OF_RESOURCES",
    6: "RSMI_STATUS_INTERNAL_EXCEPTION",
    7: "RSMI_STATUS_INPUT_OUT_OF_BOUNDS",
    8: "RSMI_STATUS_INIT_ERROR",
    9: "RSMI_STATUS_NOT_YET_IMPLEMENTED",
    10: "RSMI_STATUS_NOT_FOUND",
    11: "RSMI_STATUS_INSUFFICIENT_SIZE",
    12: "RSMI_STATUS_INTERRUPT",
    13: "RSMI_STATUS_UNEXPECTED_SIZE",
    14: "RSMI_STATUS_NO_DATA",
    15: "RSMI_STATUS_UNEXPECTED_DATA",
    16: "RSMI_STATUS_BUSY",
    17: "RSMI_STATUS_REFCOUNT_OVERFLOW",
}
#: rsmi_memory_type_t RSMI_MEM_TYPE_VRAM.
MEM_VRAM: Final = 0
#: rsmi_temperature_type_t RSMI_TEMP_TYPE_EDGE and rsmi_temperature_metric_t RSMI_TEMP_CURRENT.
TEMP_EDGE: Final = 0
TEMP_CURRENT: Final = 0
#: rsmi_gpu_block_t RSMI_GPU_BLOCK_UMC: the memory controller, whose uncorrectable ECC
#: count is the health signal GPUStack uses for AMD and Hygon (gpustack-devices.md §2.2).
BLOCK_UMC: Final = 0x1
#: rsmi_dev_name_get's buffer; ROCm tools use 256 bytes.
NAME_LEN: Final = 256


class ErrorCount(ctypes.Structure):
    """rsmi_error_count_t."""

    _fields_ = [("correctable_err", c_uint64), ("uncorrectable_err", c_uint64)]


class RsmiError(RuntimeError):
    """An rsmi call failed; the message names the call, the DCU and the status."""

    def __init__(self, function: str, status: int, index: int | None = None) -> None:
        self.function = function
        self.status = status
        at = f" for DCU {index}" if index is not None else ""
        name = STATUS_NAMES.get(status, "unknown status")
        super().__init__(
            f"Hygon ROCm SMI call {function}{at} failed with {status} ({name}); check the DCU "
            "with `hy-smi` and the kernel log (dmesg), and that the node agent can open /dev/kfd"
        )


# (name, argtypes) of every function the plugin calls.
_SIGNATURES: Final[dict[str, tuple[Any, ...]]] = {
    "rsmi_init": (c_uint64,),
    "rsmi_shut_down": (),
    "rsmi_num_monitor_devices": (POINTER(c_uint32),),
    "rsmi_dev_name_get": (c_uint32, c_char_p, c_size_t),
    "rsmi_dev_unique_id_get": (c_uint32, POINTER(c_uint64)),
    "rsmi_dev_pci_id_get": (c_uint32, POINTER(c_uint64)),
    "rsmi_topo_numa_affinity_get": (c_uint32, POINTER(c_int32)),
    "rsmi_dev_memory_total_get": (c_uint32, c_uint32, POINTER(c_uint64)),
    "rsmi_dev_memory_usage_get": (c_uint32, c_uint32, POINTER(c_uint64)),
    "rsmi_dev_busy_percent_get": (c_uint32, POINTER(c_uint32)),
    "rsmi_dev_temp_metric_get": (c_uint32, c_uint32, c_uint32, POINTER(c_int64)),
    "rsmi_dev_power_ave_get": (c_uint32, c_uint32, POINTER(c_uint64)),
    "rsmi_dev_ecc_count_get": (c_uint32, c_uint32, POINTER(ErrorCount)),
    "rsmi_dev_drm_render_minor_get": (c_uint32, POINTER(c_uint32)),
}

#: Key of :class:`Rsmi` in ``ctx.state``.
STATE_KEY: Final = "rsmi"


@dataclass
class Rsmi:
    """The loaded library with its functions declared, and what hooks share between calls."""

    library: NativeLibrary
    fns: dict[str, Callable[..., int]] = field(default_factory=dict)

    def call(self, name: str, *args: Any, index: int | None = None) -> None:
        status = self.fns[name](*args)
        if status != SUCCESS:
            raise RsmiError(name, status, index)

    def optional(self, name: str, *args: Any, index: int | None = None) -> bool:
        """Call *name*; False when the DCU does not support it (no reading, not an error)."""
        status = self.fns[name](*args)
        if status == NOT_SUPPORTED:
            return False
        if status != SUCCESS:
            raise RsmiError(name, status, index)
        return True

    # -- readings ---------------------------------------------------------------------------

    def count(self) -> int:
        n = c_uint32()
        self.call("rsmi_num_monitor_devices", byref(n))
        return n.value

    def name(self, index: int) -> str:
        buf = ctypes.create_string_buffer(NAME_LEN)
        self.call("rsmi_dev_name_get", index, buf, NAME_LEN, index=index)
        return buf.value.decode(errors="replace").strip()

    def unique_id(self, index: int) -> int | None:
        value = c_uint64()
        ok = self.optional("rsmi_dev_unique_id_get", index, byref(value), index=index)
        return value.value if ok else None

    def pci_id(self, index: int) -> int:
        value = c_uint64()
        self.call("rsmi_dev_pci_id_get", index, byref(value), index=index)
        return value.value

    def numa(self, index: int) -> int | None:
        value = c_int32()
        ok = self.optional("rsmi_topo_numa_affinity_get", index, byref(value), index=index)
        return value.value if ok and value.value >= 0 else None

    def memory_total(self, index: int) -> int:
        value = c_uint64()
        self.call("rsmi_dev_memory_total_get", index, MEM_VRAM, byref(value), index=index)
        return value.value

    def memory_used(self, index: int) -> int | None:
        value = c_uint64()
        ok = self.optional("rsmi_dev_memory_usage_get", index, MEM_VRAM, byref(value), index=index)
        return value.value if ok else None

    def busy_percent(self, index: int) -> int | None:
        value = c_uint32()
        ok = self.optional("rsmi_dev_busy_percent_get", index, byref(value), index=index)
        return value.value if ok else None

    def temperature_mc(self, index: int) -> int | None:
        value = c_int64()
        ok = self.optional(
            "rsmi_dev_temp_metric_get", index, TEMP_EDGE, TEMP_CURRENT, byref(value), index=index
        )
        return value.value if ok else None

    def power_uw(self, index: int) -> int | None:
        value = c_uint64()
        ok = self.optional("rsmi_dev_power_ave_get", index, 0, byref(value), index=index)
        return value.value if ok else None

    def uncorrectable_ecc(self, index: int) -> int | None:
        counts = ErrorCount()
        ok = self.optional("rsmi_dev_ecc_count_get", index, BLOCK_UMC, byref(counts), index=index)
        return counts.uncorrectable_err if ok else None

    def render_minor(self, index: int) -> int | None:
        value = c_uint32()
        ok = self.optional("rsmi_dev_drm_render_minor_get", index, byref(value), index=index)
        return value.value if ok else None


def decode_pci_id(bdfid: int) -> tuple[int, int, int, int]:
    """rsmi's BDFID: domain in bits 32-63, bus 8-15, device 3-7, function 0-2 (rocm_smi.h)."""
    return (bdfid >> 32) & 0xFFFFFFFF, (bdfid >> 8) & 0xFF, (bdfid >> 3) & 0x1F, bdfid & 0x7


def open_rsmi(ctx: NodeContext, config: HygonConfig) -> Rsmi:
    """Load and initialise the library on the vendor thread; ``VendorUnavailable`` says why not."""
    paths = loading.candidates(config, SONAMES, config.library_dirs)
    library = loading.open_library(ctx, VENDOR, paths, isolated=config.deepbind)
    rsmi = Rsmi(library=library)
    for name, argtypes in _SIGNATURES.items():
        rsmi.fns[name] = library.function(name, ctypes.c_int, argtypes)
    status = rsmi.fns["rsmi_init"](0)
    if status != SUCCESS:
        raise VendorUnavailable(
            VENDOR,
            f"{library.path} loaded, but rsmi_init returned {status} "
            f"({STATUS_NAMES.get(status, 'unknown status')}): the DCU kernel driver (hydcu) "
            "is not loaded, or this container cannot open /dev/kfd. Check `hy-smi` on the node.",
        )
    ctx.state[STATE_KEY] = rsmi
    return rsmi


def close_rsmi(ctx: NodeContext) -> None:
    rsmi = ctx.state.pop(STATE_KEY, None)
    if isinstance(rsmi, Rsmi):
        rsmi.fns["rsmi_shut_down"]()


def state(ctx: NodeContext) -> Rsmi:
    rsmi = ctx.state.get(STATE_KEY)
    if not isinstance(rsmi, Rsmi):
        raise VendorUnavailable(VENDOR, "ROCm SMI is not initialised: xpushare_startup did not run")
    return rsmi
