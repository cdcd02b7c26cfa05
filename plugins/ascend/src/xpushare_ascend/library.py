"""A ctypes binding of Huawei's DCMI (``libdcmi.so``), both API generations.

Why our own binding: Huawei publishes no Python binding (python-ecosystem.md §3.3), and the
GPUStack operator had to hand-write a C wrapper to pin DCMI to one OS thread
(gpustack-devices.md §5.4). Here the pinning comes from xpushare's library thread: this
module is only ever used from node-side hooks, which run on it, so ``dcmi_init``, every call
and the library's per-thread error state share one thread by construction.

Two generations (gpustack-devices.md §1.4): **V1** (``dcmi_*``, up to 910B/310P) addresses a
chip as (card, device-in-card); **V2** (``dcmiv2_*``, the A5/950 generation) has no card
level and addresses a chip by its device id, so this binding presents each V2 chip as a card
holding one device. Initialisation tries V1 first and falls back to V2 when the driver
*refuses* ``dcmi_init`` (a V2 driver still exports the V1 names and answers NOT_SUPPORT), or
when the library has no V1 entry points at all.

Function names, argument lists and struct layouts are those of Huawei's
``dcmi_interface_api.h`` (CANN driver package); where a reading is absent from a driver (a
missing symbol, or the driver answering NOT_SUPPORT) the reading is ``None``, never zero.
"""

from __future__ import annotations

import ctypes
import logging
import os
from ctypes import POINTER, byref, c_int, c_ubyte, c_uint, c_ulong, c_ulonglong
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from xpushare.native import MissingSymbol, candidate_paths

if TYPE_CHECKING:
    from collections.abc import Callable

    from xpushare.native import NativeLibrary
    from xpushare_ascend.config import AscendConfig

log = logging.getLogger(__name__)

SONAME: Final = "libdcmi.so"

#: RTLD_LAZY like GPUStack's DCMI wrapper (gpustack-devices.md §5.4): libdcmi pulls in the
#: driver's own libraries, some of whose symbols are only resolved when used; RTLD_LOCAL so
#: its symbols never satisfy another vendor's library in this process.
DLOPEN_MODE: Final = os.RTLD_LAZY | os.RTLD_LOCAL


def library_candidates(config: AscendConfig) -> list[str]:
    """Where to look for libdcmi.so, best first.

    The configured path; then under the host root, the driver's own directory
    (``<ascend_home>/driver/lib64/driver``, GPUStack's choice), its parent, and DCMI's
    install directory ``/usr/local/dcmi``, and the standard library directories; then the
    bare name for the dynamic loader's search (``LD_LIBRARY_PATH``, the ldconfig cache).
    """
    home = config.ascend_home.rstrip("/")
    extra = [f"{home}/driver/lib64/driver", f"{home}/driver/lib64", "/usr/local/dcmi"]
    roots = [config.host_root] if config.host_root else []
    found = candidate_paths([SONAME], roots=roots, extra_dirs=extra)
    if roots:
        # The extra directories first: they are where Ascend installs DCMI.
        first = [str(config.on_host(f"{d}/{SONAME}")) for d in extra]
        found = list(dict.fromkeys([*first, *found]))
    if config.library_path:
        found.insert(0, config.library_path)
    return list(dict.fromkeys(found))


# --- constants of dcmi_interface_api.h ---------------------------------------------------

MAX_CHIP_NAME_LEN: Final = 32
DIE_ID_COUNT: Final = 5
#: The most cards DCMI reports (MAX_CARD_NUM); bounds the list we pass in.
MAX_CARD_NUM: Final = 64
#: V2 device lists are per chip, and a host holds at most MAX_CARD_NUM cards of 16 chips at
#: most; 1024 leaves room with a 4 KiB buffer.
MAX_V2_DEVICES: Final = 1024

DCMI_OK: Final = 0
#: Error codes (DCMI_ERROR_CODE_BASE is -8000).
ERROR_NAMES: Final[dict[int, str]] = {
    -8001: "DCMI_ERR_CODE_INVALID_PARAMETER",
    -8002: "DCMI_ERR_CODE_OPER_NOT_PERMITTED",
    -8003: "DCMI_ERR_CODE_MEM_OPERATE_FAIL",
    -8004: "DCMI_ERR_CODE_SECURE_FUN_FAIL",
    -8005: "DCMI_ERR_CODE_INNER_ERR",
    -8006: "DCMI_ERR_CODE_TIME_OUT",
    -8007: "DCMI_ERR_CODE_INVALID_DEVICE_ID",
    -8008: "DCMI_ERR_CODE_DEVICE_NOT_EXIST",
    -8009: "DCMI_ERR_CODE_IOCTL_FAIL",
    -8010: "DCMI_ERR_CODE_SEND_MSG_FAIL",
    -8011: "DCMI_ERR_CODE_RECV_MSG_FAIL",
    -8012: "DCMI_ERR_CODE_NOT_REDAY",
    -8013: "DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER",
    -8014: "DCMI_ERR_CODE_FILE_OPERATE_FAIL",
    -8015: "DCMI_ERR_CODE_RESET_FAIL",
    -8016: "DCMI_ERR_CODE_ABORT_OPERATE",
    -8017: "DCMI_ERR_CODE_IS_UPGRADING",
    -8020: "DCMI_ERR_CODE_RESOURCE_OCCUPIED",
    -8022: "DCMI_ERR_CODE_PARTITION_NOT_RIGHT",
    -8023: "DCMI_ERR_CODE_CONFIG_INFO_NOT_EXIST",
    -8255: "DCMI_ERR_CODE_NOT_SUPPORT",
}
NOT_SUPPORT: Final = -8255

#: enum dcmi_unit_type: only NPU units are accelerators (cards also hold MCUs and CPUs).
NPU_TYPE: Final = 0
#: enum dcmi_die_type.
NDIE: Final = 0
DDIE: Final = 2
#: enum dcmi_device_type, for ECC: DDR first, then SRAM, HBM.
DEVICE_TYPE_DDR: Final = 0
DEVICE_TYPE_HBM: Final = 2
#: DCMI_UTILIZATION_RATE_* of dcmi_get_device_utilization_rate.
UTILIZATION_AICORE: Final = 2
UTILIZATION_HBM: Final = 6
#: dcmi_get_device_health: 0 OK, 1 general (minor) alarm, 2 major, 3 critical; anything
#: else (0xFFFFFFFF: not present) is not healthy either.
HEALTH_OK: Final = 0
HEALTH_MINOR_ALARM: Final = 1


# --- structs -------------------------------------------------------------------------------


class ChipInfoV1(ctypes.Structure):
    """struct dcmi_chip_info."""

    _fields_ = [
        ("chip_type", c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_name", c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_ver", c_ubyte * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", c_uint),
    ]


class ChipInfoV2(ctypes.Structure):
    """struct dcmi_chip_info_v2: V1's fields and the NPU's marketing name."""

    _fields_ = [
        ("chip_type", c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_name", c_ubyte * MAX_CHIP_NAME_LEN),
        ("chip_ver", c_ubyte * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", c_uint),
        ("npu_name", c_ubyte * MAX_CHIP_NAME_LEN),
    ]


class HbmInfo(ctypes.Structure):
    """struct dcmi_hbm_info; sizes in MB."""

    _fields_ = [
        ("memory_size", c_ulonglong),
        ("freq", c_uint),
        ("memory_usage", c_ulonglong),
        ("temp", c_int),
        ("bandwith_util_rate", c_uint),
    ]


class MemoryInfoV3(ctypes.Structure):
    """struct dcmi_get_memory_info_stru (96 bytes): the DDR of chips without HBM (310P)."""

    _fields_ = [
        ("memory_size", c_ulonglong),
        ("memory_available", c_ulonglong),
        ("freq", c_uint),
        ("hugepagesize", c_ulong),
        ("hugepages_total", c_ulong),
        ("hugepages_free", c_ulong),
        ("utiliza", c_uint),
        ("reserve", c_ubyte * 60),
    ]


class PcieInfoAll(ctypes.Structure):
    """struct dcmi_pcie_info_all (64 bytes)."""

    _fields_ = [
        ("venderid", c_uint),
        ("subvenderid", c_uint),
        ("deviceid", c_uint),
        ("subdeviceid", c_uint),
        ("domain", c_int),
        ("bdf_busid", c_uint),
        ("bdf_deviceid", c_uint),
        ("bdf_funcid", c_uint),
        ("reserve", c_ubyte * 32),
    ]


class DieId(ctypes.Structure):
    """struct dcmi_die_id: the die's serial number, five 32-bit words."""

    _fields_ = [("soc_die", c_uint * DIE_ID_COUNT)]


class EccInfo(ctypes.Structure):
    """struct dcmi_ecc_info."""

    _fields_ = [
        ("enable_flag", c_int),
        ("single_bit_error_cnt", c_uint),
        ("double_bit_error_cnt", c_uint),
        ("total_single_bit_error_cnt", c_uint),
        ("total_double_bit_error_cnt", c_uint),
        ("single_bit_isolated_pages_cnt", c_uint),
        ("double_bit_isolated_pages_cnt", c_uint),
    ]


# --- results -------------------------------------------------------------------------------


class DcmiError(RuntimeError):
    """A DCMI call returned an error code; the message names the call, the chip and the code."""

    def __init__(self, function: str, code: int, where: str = "") -> None:
        self.function = function
        self.code = code
        name = ERROR_NAMES.get(code, "unknown DCMI error")
        at = f" for {where}" if where else ""
        super().__init__(
            f"Ascend DCMI call {function}{at} failed with {code} ({name}); check the chip with "
            "`npu-smi info` and the driver log (/var/log/npu), and that the node agent can "
            "open /dev/davinci_manager"
        )


class DcmiInitError(DcmiError):
    """Neither API generation initialised: the driver is not loaded, or not reachable."""

    def __init__(self, attempts: list[tuple[str, int]]) -> None:
        self.attempts = attempts
        said = ", ".join(
            f"{name} returned {code} ({ERROR_NAMES.get(code, 'unknown DCMI error')})"
            for name, code in attempts
        )
        name, code = attempts[-1]
        RuntimeError.__init__(
            self,
            f"Ascend DCMI did not initialise: {said}. The NPU driver is not loaded, or this "
            "container cannot open /dev/davinci_manager (run the node agent with the host's "
            "/dev and the driver mounted).",
        )
        self.function = name
        self.code = code


@dataclass(frozen=True, slots=True)
class Chip:
    """How DCMI addresses one NPU chip: V1's (card, device-in-card); V2's device id."""

    card: int
    device: int

    def __str__(self) -> str:
        return f"card {self.card} device {self.device}"


@dataclass(frozen=True, slots=True)
class ChipInfo:
    chip_type: str
    chip_name: str
    chip_ver: str
    ai_core: int
    npu_name: str = ""


@dataclass(frozen=True, slots=True)
class Memory:
    """A chip's own memory in MiB: HBM where the chip has it, else its DDR."""

    total_mib: int
    used_mib: int | None
    kind: Literal["hbm", "ddr"]


@dataclass(frozen=True, slots=True)
class Ecc:
    enabled: bool
    single_bit: int
    double_bit: int


def _text(raw: ctypes.Array[c_ubyte]) -> str:
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace").strip()


# --- the binding --------------------------------------------------------------------------

#: Per operation: the V1 symbol (card, device, ...), the V2 symbols (dev_id, ...) to try in
#: order, and the pointer type of the output argument(s).
_OPS: Final[dict[str, tuple[str | None, tuple[str, ...], tuple[Any, ...]]]] = {
    "health": ("dcmi_get_device_health", ("dcmiv2_get_device_health",), (POINTER(c_uint),)),
    "type": ("dcmi_get_device_type", ("dcmiv2_get_device_type",), (POINTER(c_int),)),
    "hbm": ("dcmi_get_device_hbm_info", ("dcmiv2_get_device_hbm_info",), (POINTER(HbmInfo),)),
    "ddr": ("dcmi_get_device_memory_info_v3", (), (POINTER(MemoryInfoV3),)),
    "temperature": (
        "dcmi_get_device_temperature",
        ("dcmiv2_get_device_temperature",),
        (POINTER(c_int),),
    ),
    "power": ("dcmi_get_device_power_info", ("dcmiv2_get_device_power_info",), (POINTER(c_int),)),
    "pcie": (
        "dcmi_get_device_pcie_info_v2",
        ("dcmiv2_get_device_pcie_info",),
        (POINTER(PcieInfoAll),),
    ),
    "utilization": (
        "dcmi_get_device_utilization_rate",
        ("dcmiv2_get_device_utilization_rate",),
        (c_int, POINTER(c_uint)),
    ),
    "ecc": (
        "dcmi_get_device_ecc_info",
        ("dcmiv2_get_device_ecc_info",),
        (c_int, POINTER(EccInfo)),
    ),
    "die": (
        "dcmi_get_device_die_v2",
        ("dcmiv2_get_device_die", "dcmiv2_get_device_die_id"),
        (c_int, POINTER(DieId)),
    ),
}


class Dcmi:
    """An initialised DCMI library of one generation; use it on the vendor's library thread.

    Build it with :meth:`open`. Methods raise :class:`DcmiError` for a failed call that the
    caller needs, and return ``None`` for an optional reading the driver does not offer.
    """

    def __init__(self, lib: NativeLibrary, generation: Literal[1, 2]) -> None:
        self.lib = lib
        self.generation = generation
        self._fns: dict[str, Callable[..., int] | None] = {}

    # -- opening ------------------------------------------------------------------------

    @classmethod
    def open(cls, lib: NativeLibrary) -> Dcmi:
        """Initialise DCMI, V1 first, V2 when the driver refuses V1 (or has no V1 at all).

        :raises DcmiInitError: no generation initialised; every attempt and its code listed.
        :raises MissingSymbol: the library exports neither ``dcmi_init`` nor ``dcmiv2_init``,
            or lacks a function the chosen generation cannot work without.
        """
        attempts: list[tuple[str, int]] = []
        for generation, name in ((1, "dcmi_init"), (2, "dcmiv2_init")):
            if not lib.has(name):
                continue
            code = lib.function(name, c_int, [])()
            if code == DCMI_OK:
                return cls(lib, 1 if generation == 1 else 2)._checked()
            log.info("Ascend: %s returned %s", name, code)
            attempts.append((name, code))
        if not attempts:
            raise MissingSymbol(lib.vendor, lib.path, "dcmi_init", "and no dcmiv2_init either")
        raise DcmiInitError(attempts)

    def _checked(self) -> Dcmi:
        """Resolve the functions this generation cannot work without, so a library that
        lacks one fails at startup with the symbol named, not at the first Allocate."""
        if self.generation == 1:
            self._list_fn()
            for name in (
                "dcmi_get_device_num_in_card",
                "dcmi_get_device_chip_info",
                "dcmi_get_device_logic_id",
                "dcmi_get_device_phyid_from_logicid",
            ):
                self._required(name)
        else:
            for name in (
                "dcmiv2_get_device_list",
                "dcmiv2_get_device_chip_info",
                "dcmiv2_get_chip_phyid_from_dev_id",
            ):
                self._required(name)
        self._op_fn("health", required=True)
        return self

    # -- symbol resolution ----------------------------------------------------------------

    _SIGNATURES: Final[dict[str, list[Any]]] = {
        "dcmi_get_card_list": [POINTER(c_int), POINTER(c_int), c_int],
        "dcmi_get_card_num_list": [POINTER(c_int), POINTER(c_int), c_int],
        "dcmi_get_device_num_in_card": [c_int, POINTER(c_int)],
        "dcmi_get_device_chip_info": [c_int, c_int, POINTER(ChipInfoV1)],
        "dcmi_get_device_logic_id": [POINTER(c_int), c_int, c_int],
        "dcmi_get_device_phyid_from_logicid": [c_uint, POINTER(c_uint)],
        "dcmiv2_get_device_list": [POINTER(c_int), POINTER(c_int), c_int],
        "dcmiv2_get_device_chip_info": [c_int, POINTER(ChipInfoV2)],
        "dcmiv2_get_chip_phyid_from_dev_id": [c_uint, POINTER(c_uint)],
    }

    def _required(self, name: str) -> Callable[..., int]:
        fn = self._fns.get(name)
        if fn is None:
            fn = self.lib.function(name, c_int, self._SIGNATURES[name])
            self._fns[name] = fn
        return fn

    def _list_fn(self) -> Callable[..., int]:
        # The 2021 header calls it dcmi_get_card_num_list, later ones dcmi_get_card_list;
        # the signatures are the same.
        for name in ("dcmi_get_card_list", "dcmi_get_card_num_list"):
            if name in self._fns or self.lib.has(name):
                return self._required(name)
        raise MissingSymbol(
            self.lib.vendor, self.lib.path, "dcmi_get_card_list", "nor dcmi_get_card_num_list"
        )

    def _op_fn(self, op: str, *, required: bool = False) -> Callable[..., int] | None:
        key = f"op:{op}"
        if key in self._fns:
            return self._fns[key]
        v1, v2, outs = _OPS[op]
        names = (v1,) if self.generation == 1 else v2
        head: list[Any] = [c_int, c_int] if self.generation == 1 else [c_int]
        fn: Callable[..., int] | None = None
        for name in names:
            if name is not None and self.lib.has(name):
                fn = self.lib.function(name, c_int, [*head, *outs])
                break
        if fn is None and required:
            wanted = next((n for n in names if n), op)
            raise MissingSymbol(self.lib.vendor, self.lib.path, wanted)
        self._fns[key] = fn
        return fn

    def _op(self, op: str, chip: Chip, *args: Any, optional: bool = True) -> bool:
        """Call *op* for *chip*; False when the driver lacks it (symbol or NOT_SUPPORT)."""
        fn = self._op_fn(op, required=not optional)
        if fn is None:
            return False
        head = (chip.card, chip.device) if self.generation == 1 else (chip.card,)
        code = fn(*head, *args)
        if code == DCMI_OK:
            return True
        if optional and code == NOT_SUPPORT:
            return False
        raise DcmiError(getattr(fn, "__name__", op), code, str(chip))

    def _call(self, name: str, *args: Any, where: str = "") -> None:
        code = self._required(name)(*args)
        if code != DCMI_OK:
            raise DcmiError(name, code, where)

    # -- enumeration ----------------------------------------------------------------------

    def chips(self) -> list[Chip]:
        """Every NPU chip, in the driver's order; MCUs and CPUs on a card are left out."""
        if self.generation == 2:
            ids = (c_int * MAX_V2_DEVICES)()
            count = c_int(0)
            self._call("dcmiv2_get_device_list", ids, byref(count), MAX_V2_DEVICES)
            return [Chip(ids[i], 0) for i in range(min(count.value, MAX_V2_DEVICES))]
        cards = (c_int * MAX_CARD_NUM)()
        num = c_int(0)
        list_fn = self._list_fn()
        code = list_fn(byref(num), cards, MAX_CARD_NUM)
        if code != DCMI_OK:
            raise DcmiError(getattr(list_fn, "__name__", "dcmi_get_card_list"), code)
        found: list[Chip] = []
        for card in (cards[i] for i in range(min(num.value, MAX_CARD_NUM))):
            per_card = c_int(0)
            self._call("dcmi_get_device_num_in_card", card, byref(per_card), where=f"card {card}")
            for device in range(per_card.value):
                chip = Chip(card, device)
                if self.is_npu(chip):
                    found.append(chip)
        return found

    def is_npu(self, chip: Chip) -> bool:
        unit = c_int(NPU_TYPE)
        if not self._op("type", chip, byref(unit)):
            return True  # drivers without the call report NPUs only
        return unit.value == NPU_TYPE

    # -- identity -------------------------------------------------------------------------

    def chip_info(self, chip: Chip) -> ChipInfo:
        if self.generation == 2:
            v2 = ChipInfoV2()
            self._call("dcmiv2_get_device_chip_info", chip.card, byref(v2), where=str(chip))
            return ChipInfo(
                _text(v2.chip_type),
                _text(v2.chip_name),
                _text(v2.chip_ver),
                v2.aicore_cnt,
                _text(v2.npu_name),
            )
        v1 = ChipInfoV1()
        self._call("dcmi_get_device_chip_info", chip.card, chip.device, byref(v1), where=str(chip))
        return ChipInfo(_text(v1.chip_type), _text(v1.chip_name), _text(v1.chip_ver), v1.aicore_cnt)

    def logic_id(self, chip: Chip) -> int:
        """The driver's logical id (V2: the device id itself)."""
        if self.generation == 2:
            return chip.card
        logic = c_int(0)
        self._call(
            "dcmi_get_device_logic_id", byref(logic), chip.card, chip.device, where=str(chip)
        )
        return logic.value

    def phy_id(self, chip: Chip) -> int:
        """The physical id: N of /dev/davinci<N> and of ASCEND_VISIBLE_DEVICES."""
        phy = c_uint(0)
        if self.generation == 2:
            self._call("dcmiv2_get_chip_phyid_from_dev_id", chip.card, byref(phy), where=str(chip))
        else:
            self._call(
                "dcmi_get_device_phyid_from_logicid",
                self.logic_id(chip),
                byref(phy),
                where=str(chip),
            )
        return phy.value

    def die_id(self, chip: Chip) -> tuple[int, ...] | None:
        """The die's serial number, the stable identity of a chip; ``None`` if unreadable.

        A5 (V2) drivers answer only for the DDIE, so that is asked when NDIE is refused.
        """
        for die_type in (NDIE, DDIE):
            die = DieId()
            if self._op("die", chip, die_type, byref(die)):
                words = tuple(die.soc_die)
                if any(words):
                    return words
        return None

    def pci_bus_id(self, chip: Chip) -> str | None:
        info = PcieInfoAll()
        if not self._op("pcie", chip, byref(info)):
            return None
        return (
            f"{max(info.domain, 0):04x}:{info.bdf_busid:02x}:"
            f"{info.bdf_deviceid:02x}.{info.bdf_funcid:x}"
        )

    # -- readings -------------------------------------------------------------------------

    def health(self, chip: Chip) -> int:
        code = c_uint(0)
        self._op("health", chip, byref(code), optional=False)
        return code.value

    def memory(self, chip: Chip) -> Memory | None:
        """HBM when the chip has it, else DDR (310P); ``None`` when neither is readable."""
        hbm = HbmInfo()
        if self._op("hbm", chip, byref(hbm)) and hbm.memory_size > 0:
            return Memory(int(hbm.memory_size), int(hbm.memory_usage), "hbm")
        ddr = MemoryInfoV3()
        if self._op("ddr", chip, byref(ddr)) and ddr.memory_size > 0:
            used = max(0, int(ddr.memory_size) * int(ddr.utiliza) // 100)
            return Memory(int(ddr.memory_size), used, "ddr")
        return None

    def utilization(self, chip: Chip, kind: int = UTILIZATION_AICORE) -> int | None:
        rate = c_uint(0)
        return rate.value if self._op("utilization", chip, kind, byref(rate)) else None

    def temperature_c(self, chip: Chip) -> int | None:
        value = c_int(0)
        return value.value if self._op("temperature", chip, byref(value)) else None

    def power_w(self, chip: Chip) -> float | None:
        # DCMI reports power in units of 0.1 W (gpustack-devices.md §2.3: "deciwatts").
        value = c_int(0)
        return value.value / 10 if self._op("power", chip, byref(value)) else None

    def ecc(self, chip: Chip, memory_kind: Literal["hbm", "ddr"]) -> Ecc | None:
        info = EccInfo()
        kind = DEVICE_TYPE_HBM if memory_kind == "hbm" else DEVICE_TYPE_DDR
        if not self._op("ecc", chip, kind, byref(info)):
            return None
        return Ecc(bool(info.enable_flag), info.single_bit_error_cnt, info.double_bit_error_cnt)
