"""What the ctypes bindings of NVML-shaped management libraries share.

Why shared: T-Head's HGML, Iluvatar's IXML and Biren's BRML copy NVML's C API under their own
prefixes: an ``*Init``/``*Shutdown`` pair, opaque device handles, ``int`` return codes where 0
is success and 3 is "not supported", ``*Memory_t`` in bytes and ``*Utilization_t`` in percent.
Each vendor's ``library`` module keeps its names, structs and messages (a subclass of
:class:`NvmlShapedLibrary` and of :class:`NvmlShapedError`); the calling, the reading of
optional calls and the loading are here once.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, byref, c_char, c_char_p, c_uint, c_ulonglong, c_void_p
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self

from xpushare.errors import VendorUnavailable
from xpushare_others.common import loading

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from xpushare.native import NativeLibrary, NodeContext

#: NVML's return codes for success and for a call this device or driver does not support.
SUCCESS: Final = 0
NOT_SUPPORTED: Final = 3
#: NVML's ``NVML_TEMPERATURE_GPU`` sensor, which these libraries keep.
TEMPERATURE_GPU: Final = 0
#: ``nvmlReturn_t`` names (NVML's header), which the libraries that copy NVML's API keep.
NVML_RETURN_NAMES: Final = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    6: "NOT_FOUND",
    9: "DRIVER_NOT_LOADED",
    12: "LIBRARY_NOT_FOUND",
    15: "GPU_IS_LOST",
    18: "LIB_RM_VERSION_MISMATCH",
    999: "UNKNOWN",
}


class Memory(ctypes.Structure):
    """NVML's ``nvmlMemory_t`` layout, bytes."""

    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class Utilization(ctypes.Structure):
    """NVML's ``nvmlUtilization_t`` layout, percent."""

    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class NvmlPciInfoV3(ctypes.Structure):
    """NVML's ``nvmlPciInfo_t`` as ``nvmlDeviceGetPciInfo_v3`` fills it."""

    _fields_ = [
        ("busIdLegacy", c_char * 16),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * 32),
    ]


class NvmlShapedError(RuntimeError):
    """A failed call, naming the vendor's library, the call, the device and what to check.

    Each vendor's subclass sets the class attributes below.
    """

    #: The vendor and its library, as the message starts: ``"T-Head HGML"``.
    library_label: ClassVar[str]
    #: What the vendor calls one device: ``"GPU"``, ``"PPU"``.
    device_noun: ClassVar[str]
    #: The vendor's command-line tool that shows the device: ``"ppu-smi"``.
    check_tool: ClassVar[str]
    #: The library's names for its return codes.
    return_names: ClassVar[Mapping[int, str]]

    def __init__(self, function: str, code: int, device: int | str | None = None) -> None:
        self.function = function
        self.code = code
        if isinstance(device, int):
            at = f" for {self.device_noun} {device}"
        else:
            at = f" for {device}" if device else ""
        super().__init__(
            f"{self.library_label} call {function}{at} failed with {code} "
            f"({self.return_names.get(code, 'unknown')}); check the {self.device_noun} with "
            f"`{self.check_tool}` and the kernel log (dmesg)"
        )


@dataclass
class NvmlShapedLibrary:
    """One loaded NVML-shaped library and its bound functions.

    *device* arguments say which device a failure is reported for: its index (an ``int``,
    named with the error's device noun) or a description (``"SVI instance 1 of GPU 0"``).
    """

    #: The vendor's error type (its message names the vendor and its tool).
    error: ClassVar[type[NvmlShapedError]]
    #: The functions that count devices and give one's handle.
    count_function: ClassVar[str]
    handle_function: ClassVar[str]
    memory_function: ClassVar[str]
    utilization_function: ClassVar[str]
    temperature_function: ClassVar[str]
    shutdown_function: ClassVar[str]
    #: The vendor's key in ``ctx.state`` and the library's short name (``"HGML"``).
    state_key: ClassVar[str]
    short_name: ClassVar[str]
    vendor: ClassVar[str]

    library: NativeLibrary
    fns: dict[str, Callable[..., int]] = field(default_factory=dict)
    driver_version: str = ""

    def call(self, name: str, *args: Any, device: int | str | None = None) -> None:
        code = self.fns[name](*args)
        if code != SUCCESS:
            raise self.error(name, code, device)

    def optional(self, name: str, *args: Any, device: int | str | None = None) -> bool:
        """Whether the call answered: ``False`` where it is absent or not supported."""
        fn = self.fns.get(name)
        if fn is None:
            return False
        code = fn(*args)
        if code == NOT_SUPPORTED:
            return False
        if code != SUCCESS:
            raise self.error(name, code, device)
        return True

    def count(self) -> int:
        n = c_uint()
        self.call(self.count_function, byref(n))
        return n.value

    def handle(self, index: int) -> c_void_p:
        h = c_void_p()
        self.call(self.handle_function, index, byref(h), device=index)
        return h

    def text(self, name: str, handle: c_void_p, size: int, device: int | str) -> str:
        buf = ctypes.create_string_buffer(size)
        self.call(name, handle, buf, size, device=device)
        return buf.value.decode(errors="replace").strip()

    def memory(self, handle: c_void_p, device: int | str) -> Memory:
        mem = Memory()
        self.call(self.memory_function, handle, byref(mem), device=device)
        return mem

    def uint(self, name: str, handle: c_void_p, device: int | str) -> int | None:
        """An optional call's one ``unsigned int`` answer, ``None`` where it has none."""
        value = c_uint()
        return value.value if self.optional(name, handle, byref(value), device=device) else None

    def utilization(self, handle: c_void_p, device: int | str) -> int | None:
        value = Utilization()
        ok = self.optional(self.utilization_function, handle, byref(value), device=device)
        return value.gpu if ok else None

    def temperature(self, handle: c_void_p, device: int | str) -> int | None:
        value = c_uint()
        ok = self.optional(
            self.temperature_function, handle, TEMPERATURE_GPU, byref(value), device=device
        )
        return value.value if ok else None

    @classmethod
    def open(
        cls,
        ctx: NodeContext,
        paths: Sequence[str],
        *,
        isolated: bool,
        required: Mapping[str, tuple[Any, ...]],
        optional: Mapping[str, tuple[Any, ...]],
        init: str,
        driver_version: tuple[str, int],
        init_failure: str,
    ) -> Self:
        """Load the first of *paths*, bind its functions, call *init* and keep it in ``ctx``.

        *required* functions must all be there; *optional* ones are bound where present.
        *driver_version* is the call that writes the driver's version and its buffer size.
        *init_failure* says, after the code, what an init failure means and what to check.
        """
        library = loading.open_library(ctx, cls.vendor, paths, isolated=isolated)
        binding = cls(library=library)
        for name, argtypes in required.items():
            binding.fns[name] = library.function(name, ctypes.c_int, argtypes)
        for name, argtypes in optional.items():
            if library.has(name):
                binding.fns[name] = library.function(name, ctypes.c_int, argtypes)
        code = binding.fns[init]()
        if code != SUCCESS:
            raise VendorUnavailable(
                cls.vendor,
                f"{library.path} loaded, but {init} returned {code} "
                f"({cls.error.return_names.get(code, 'unknown')}): {init_failure}",
            )
        version_function, size = driver_version
        buf = ctypes.create_string_buffer(size)
        if binding.fns[version_function](buf, size) == SUCCESS:
            binding.driver_version = buf.value.decode(errors="replace").strip()
        ctx.state[cls.state_key] = binding
        return binding

    @classmethod
    def close(cls, ctx: NodeContext) -> None:
        """Shut the library down if this vendor opened it in *ctx*."""
        binding = ctx.state.pop(cls.state_key, None)
        if isinstance(binding, cls):
            binding.fns[cls.shutdown_function]()

    @classmethod
    def state(cls, ctx: NodeContext) -> Self:
        binding = ctx.state.get(cls.state_key)
        if not isinstance(binding, cls):
            raise VendorUnavailable(
                cls.vendor, f"{cls.short_name} is not initialised: xpushare_startup did not run"
            )
        return binding


def nvml_api(prefix: str) -> dict[str, tuple[Any, ...]]:
    """NVML's calls a library that copies NVML's API keeps, under *prefix* (``nvml``,
    ``hgml``), with their argument types: what :class:`NvmlApiLibrary` calls."""
    return {
        f"{prefix}Init_v2": (),
        f"{prefix}Shutdown": (),
        f"{prefix}SystemGetDriverVersion": (c_char_p, c_uint),
        f"{prefix}DeviceGetCount_v2": (POINTER(c_uint),),
        f"{prefix}DeviceGetHandleByIndex_v2": (c_uint, POINTER(c_void_p)),
        f"{prefix}DeviceGetUUID": (c_void_p, c_char_p, c_uint),
        f"{prefix}DeviceGetName": (c_void_p, c_char_p, c_uint),
        f"{prefix}DeviceGetMemoryInfo": (c_void_p, POINTER(Memory)),
        f"{prefix}DeviceGetPciInfo_v3": (c_void_p, POINTER(NvmlPciInfoV3)),
        f"{prefix}DeviceGetMinorNumber": (c_void_p, POINTER(c_uint)),
        f"{prefix}DeviceGetUtilizationRates": (c_void_p, POINTER(Utilization)),
        f"{prefix}DeviceGetTemperature": (c_void_p, c_uint, POINTER(c_uint)),
        f"{prefix}DeviceGetPowerUsage": (c_void_p, POINTER(c_uint)),
    }


class NvmlApiLibrary(NvmlShapedLibrary):
    """A library that is NVML's C API under a *prefix* (IXML keeps ``nvml``, HGML has
    ``hgml``): the names of its calls are NVML's with that prefix (:func:`nvml_api`)."""

    prefix: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        p = cls.prefix
        cls.count_function = f"{p}DeviceGetCount_v2"
        cls.handle_function = f"{p}DeviceGetHandleByIndex_v2"
        cls.memory_function = f"{p}DeviceGetMemoryInfo"
        cls.utilization_function = f"{p}DeviceGetUtilizationRates"
        cls.temperature_function = f"{p}DeviceGetTemperature"
        cls.shutdown_function = f"{p}Shutdown"

    def pci(self, handle: c_void_p, index: int) -> NvmlPciInfoV3:
        info = NvmlPciInfoV3()
        self.call(f"{self.prefix}DeviceGetPciInfo_v3", handle, byref(info), device=index)
        return info

    def minor(self, handle: c_void_p, index: int) -> int | None:
        return self.uint(f"{self.prefix}DeviceGetMinorNumber", handle, index)

    def power_mw(self, handle: c_void_p, index: int) -> int | None:
        return self.uint(f"{self.prefix}DeviceGetPowerUsage", handle, index)

    @classmethod
    def open_api(
        cls,
        ctx: NodeContext,
        paths: Sequence[str],
        *,
        isolated: bool,
        required: Mapping[str, tuple[Any, ...]],
        optional: Mapping[str, tuple[Any, ...]],
        version_len: int,
        init_failure: str,
    ) -> Self:
        """:meth:`open` with NVML's calls and the vendor's own *required* ones bound."""
        return cls.open(
            ctx,
            paths,
            isolated=isolated,
            required={**nvml_api(cls.prefix), **required},
            optional=optional,
            init=f"{cls.prefix}Init_v2",
            driver_version=(f"{cls.prefix}SystemGetDriverVersion", version_len),
            init_failure=init_failure,
        )
