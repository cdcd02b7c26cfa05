"""A ctypes binding of IXML (``libixml.so``), Iluvatar's management library.

Why ctypes: there is no Python binding on PyPI (python-ecosystem.md §3.3). IXML implements
NVIDIA's NVML C API under the same function names and structs (Deep-Spark/go-ixml's api.h is
NVML's header) plus ``ixml*`` extensions such as ``ixmlDeviceGetHealth``. Because of those
names the library is loaded isolated (see :mod:`xpushare_others.common.loading`), so that a
node agent that also drives NVIDIA GPUs never mixes the two.

Assumption: the PCI call is ``nvmlDeviceGetPciInfo_v3`` with NVML's current
``nvmlPciInfo_t`` layout, which IXML's header carries.
"""

from __future__ import annotations

from ctypes import POINTER, byref, c_ulonglong, c_void_p
from typing import TYPE_CHECKING, Any, Final

from xpushare_others.common import loading
from xpushare_others.common.nvml_shaped import NVML_RETURN_NAMES, NvmlApiLibrary, NvmlShapedError
from xpushare_others.iluvatar.config import VENDOR, IluvatarConfig

if TYPE_CHECKING:
    from xpushare.native import NodeContext

SONAMES: Final = ("libixml.so",)

#: ixmlDeviceGetHealth's value for a healthy GPU (a bit mask of problems otherwise).
HEALTH_OK: Final = 0
#: NVML's buffer sizes for UUIDs, names and the driver version.
UUID_LEN: Final = 80
NAME_LEN: Final = 96
VERSION_LEN: Final = 80


class IxmlError(NvmlShapedError):
    library_label = "Iluvatar IXML"
    device_noun = "GPU"
    check_tool = "ixsmi"
    return_names = NVML_RETURN_NAMES


#: IXML's own calls besides NVML's.
_EXTENSIONS: Final[dict[str, tuple[Any, ...]]] = {
    "ixmlDeviceGetHealth": (c_void_p, POINTER(c_ulonglong)),
}

STATE_KEY: Final = "ixml"


class Ixml(NvmlApiLibrary):
    prefix = "nvml"
    error = IxmlError
    state_key = STATE_KEY
    short_name = "IXML"
    vendor = VENDOR

    def health(self, handle: c_void_p, index: int) -> int | None:
        value = c_ulonglong()
        ok = self.optional("ixmlDeviceGetHealth", handle, byref(value), device=index)
        return value.value if ok else None


def open_ixml(ctx: NodeContext, config: IluvatarConfig) -> Ixml:
    return Ixml.open_api(
        ctx,
        loading.candidates(config, SONAMES, config.library_dirs),
        isolated=config.deepbind,
        required=_EXTENSIONS,
        optional={},
        version_len=VERSION_LEN,
        init_failure="the Iluvatar kernel driver is not loaded, or this container cannot open "
        "the GPU nodes. Check `ixsmi` on the node.",
    )


def close_ixml(ctx: NodeContext) -> None:
    Ixml.close(ctx)


def state(ctx: NodeContext) -> Ixml:
    return Ixml.state(ctx)
