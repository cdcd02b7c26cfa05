"""A ctypes binding of HGML (``libhgml.so``), T-Head's PPU management library.

Why ctypes: T-Head's ``pyhgml`` ships with its SDK, not on PyPI. HGML is NVML's C API under
``hgml`` names with NVML's structs (``pyhgml``'s ``hgmlPciInfo_t`` is ``nvmlPciInfo_t``, read
through ``hgmlDeviceGetPciInfo_v3``) and return codes, as GPUStack's ``binding/hgml`` uses it.
It is loaded isolated (see :mod:`xpushare_others.common.loading`).
"""

from __future__ import annotations

from ctypes import POINTER, byref, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from xpushare_others.common import loading
from xpushare_others.common.nvml_shaped import NVML_RETURN_NAMES, NvmlApiLibrary, NvmlShapedError
from xpushare_others.thead.config import VENDOR, TheadConfig
from xpushare_others.thead.mig import SIGNATURES as MIG_SIGNATURES

if TYPE_CHECKING:
    from xpushare.native import NodeContext
    from xpushare_others.thead.mig import GiProfile

SONAMES: Final = ("libhgml.so", "libhgml.so.1")

#: hgmlTotalEccErrors's error type and counter: uncorrected, volatile (GPUStack's rule).
ECC_UNCORRECTED: Final = 1
ECC_VOLATILE: Final = 0
UUID_LEN: Final = 96
NAME_LEN: Final = 96
VERSION_LEN: Final = 80


class HgmlError(NvmlShapedError):
    library_label = "T-Head HGML"
    device_noun = "PPU"
    check_tool = "ppu-smi"
    return_names = NVML_RETURN_NAMES


_OPTIONAL: Final[dict[str, tuple[Any, ...]]] = {
    "hgmlDeviceGetTotalEccErrors": (c_void_p, c_uint, c_uint, POINTER(c_ulonglong)),
    **MIG_SIGNATURES,
}

STATE_KEY: Final = "hgml"


@dataclass
class Hgml(NvmlApiLibrary):
    prefix = "hgml"
    error = HgmlError
    state_key = STATE_KEY
    short_name = "HGML"
    vendor = VENDOR
    #: The MIG profiles of each PPU in MIG mode (by HGML ordinal), as detection read them:
    #: what Allocate creates and release destroys by.
    geometry: dict[int, tuple[GiProfile, ...]] = field(default_factory=dict)

    def uncorrected_ecc(self, handle: c_void_p, index: int) -> int | None:
        value = c_ulonglong()
        ok = self.optional(
            "hgmlDeviceGetTotalEccErrors",
            handle,
            ECC_UNCORRECTED,
            ECC_VOLATILE,
            byref(value),
            device=index,
        )
        return value.value if ok else None


def open_hgml(ctx: NodeContext, config: TheadConfig) -> Hgml:
    return Hgml.open_api(
        ctx,
        loading.candidates(config, SONAMES, config.library_dirs),
        isolated=config.deepbind,
        required={},
        optional=_OPTIONAL,
        version_len=VERSION_LEN,
        init_failure="the PPU driver is not loaded, or this container cannot open "
        "/dev/alixpu*. Check `ppu-smi` on the node.",
    )


def close_hgml(ctx: NodeContext) -> None:
    Hgml.close(ctx)


def state(ctx: NodeContext) -> Hgml:
    return Hgml.state(ctx)
