"""Control of the fake libnvidia-ml.so.1 (fake_nvml.c beside this file) from the tests.

The tests build the library once per session (gcc, into a temporary "driver root") and
shape it per test through its ``fake_*`` functions: the plugin loads the same file on its
library thread, and the dynamic loader gives both the same loaded object, so they share the
device table.
"""

from __future__ import annotations

import ctypes
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from xpushare.testing.partitions import MigProfileSpec

SOURCE = Path(__file__).with_name("fake_nvml.c")
SONAME = "libnvidia-ml.so.1"

# nvmlReturn_t and nvmlGpuTopologyLevel_t values the tests inject.
DRIVER_NOT_LOADED = 9
NOT_SUPPORTED = 3
GPU_IS_LOST = 15
UNKNOWN = 999
TOPOLOGY_INTERNAL = 0
TOPOLOGY_SINGLE = 10
TOPOLOGY_HOSTBRIDGE = 30
TOPOLOGY_NODE = 40
TOPOLOGY_SYSTEM = 50
EVENT_XID = 0x8
EVENT_DOUBLE_BIT_ECC = 0x2
NO_INSTANCE = 0xFFFFFFFF


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-444444444444"


def mig_uuid(gpu: int, i: int) -> str:
    return f"MIG-{gpu:04x}{i:04x}-aaaa-bbbb-cccc-dddddddddddd"


def bus_id(i: int) -> str:
    return f"00000000:{0x10 + i:02X}:00.0"


@dataclass(frozen=True)
class Gpu:
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_mib: int = 81920
    sm_count: int = 108
    capability: tuple[int, int] = (8, 0)
    numa: int = 0


class FakeNvml:
    """The fake library's control functions, with Python types."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        c = ctypes
        self._sig(
            "fake_add_gpu",
            c.c_int,
            [
                c.c_char_p,
                c.c_char_p,
                c.c_ulonglong,
                c.c_uint,
                c.c_int,
                c.c_int,
                c.c_int,
                c.c_char_p,
            ],
        )
        self._sig("fake_set", c.c_int, [c.c_int, c.c_char_p, c.c_longlong])
        self._sig("fake_set_link", c.c_int, [c.c_int, c.c_int, c.c_char_p])
        self._sig("fake_set_topology", c.c_int, [c.c_int, c.c_int, c.c_int])
        self._sig(
            "fake_add_mig",
            c.c_int,
            [
                c.c_int,
                c.c_char_p,
                c.c_char_p,
                c.c_ulonglong,
                c.c_uint,
                c.c_uint,
                c.c_uint,
                c.c_uint,
            ],
        )
        self._sig("fake_add_process", c.c_int, [c.c_int, c.c_int, c.c_uint, c.c_ulonglong])
        self._sig(
            "fake_add_gi_profile",
            c.c_int,
            [
                c.c_int,
                c.c_uint,
                c.c_uint,
                c.c_char_p,
                c.c_uint,
                c.c_uint,
                c.c_uint,
                c.c_ulonglong,
                c.c_uint,
                c.c_uint,
            ],
        )
        self._sig("fake_gi_count", c.c_int, [c.c_int])
        self._sig("fake_mig_slot", c.c_int, [c.c_int, c.c_char_p])
        self._sig("fake_clear_processes", c.c_int, [c.c_int, c.c_int])
        self._sig("fake_set_mig_memory", c.c_int, [c.c_int, c.c_int, c.c_ulonglong])
        self._sig(
            "fake_push_event", c.c_int, [c.c_int, c.c_ulonglong, c.c_ulonglong, c.c_uint, c.c_uint]
        )
        self._sig("fake_fail", c.c_int, [c.c_char_p, c.c_int, c.c_int])
        self._sig("fake_reset", None, [])
        for name in ("fake_init_count", "fake_thread_violations", "fake_pending_events"):
            self._sig(name, c.c_int, [])
        self._names: list[str] = []
        self._ports: dict[int, int] = defaultdict(int)

    def _sig(self, name: str, restype: object, argtypes: list[object]) -> None:
        fn = getattr(self.lib, name)
        fn.restype = restype
        fn.argtypes = argtypes

    def reset(self) -> None:
        self.lib.fake_reset()
        self._names.clear()
        self._ports.clear()

    def add_gpus(
        self, count: int, gpu: Gpu | None = None, *, numa: list[int] | None = None
    ) -> list[str]:
        """*count* identical GPUs; returns their UUIDs (see :func:`uuid`)."""
        spec = gpu or Gpu()
        out = []
        for _ in range(count):
            i = len(self._names)
            node = numa[i] if numa is not None else spec.numa
            index = self.lib.fake_add_gpu(
                uuid(i).encode(),
                spec.name.encode(),
                spec.memory_mib,
                spec.sm_count,
                spec.capability[0],
                spec.capability[1],
                node,
                bus_id(i).encode(),
            )
            assert index == i
            self._names.append(spec.name)
            out.append(uuid(i))
        return out

    def set(self, gpu: int, key: str, value: int) -> None:
        assert self.lib.fake_set(gpu, key.encode(), value) == 0, key

    def nvlink(self, a: int, b: int, links: int = 1) -> None:
        """*links* NVLinks between GPUs *a* and *b* (both ends)."""
        for _ in range(links):
            self.lib.fake_set_link(a, self._ports[a], bus_id(b).encode())
            self._ports[a] += 1
            self.lib.fake_set_link(b, self._ports[b], bus_id(a).encode())
            self._ports[b] += 1

    def nvswitch(self, gpu: int, links: int) -> None:
        """*links* NVLinks from *gpu* to an NVSwitch (a bus id that is no GPU)."""
        for _ in range(links):
            self.lib.fake_set_link(gpu, self._ports[gpu], b"00000000:FF:00.0")
            self._ports[gpu] += 1

    def topology(self, a: int, b: int, level: int) -> None:
        self.lib.fake_set_topology(a, b, level)

    def enable_mig(self, gpu: int, *, pending: int | None = None) -> None:
        self.set(gpu, "mig_supported", 1)
        self.set(gpu, "mig_mode", 1)
        self.set(gpu, "mig_pending", 1 if pending is None else pending)

    def add_mig(
        self,
        gpu: int,
        profile: str,
        memory_mib: int,
        sm_count: int,
        slices: int,
        *,
        gi: int,
        ci: int = 0,
    ) -> str:
        """A MIG instance named as NVML names them ("<GPU name> MIG <profile>")."""
        mig = mig_uuid(gpu, gi)
        name = f"{self._names[gpu]} MIG {profile}"
        result = self.lib.fake_add_mig(
            gpu, mig.encode(), name.encode(), memory_mib, sm_count, slices, gi, ci
        )
        assert result >= 0
        return mig

    def mig_profiles(self, gpu: int, table: Sequence[MigProfileSpec]) -> None:
        """Give *gpu* the GPU instance profiles of *table* (e.g. an A100's), for dynamic MIG."""
        for spec in table:
            starts = sum(1 << s for s in spec.starts)
            assert (
                self.lib.fake_add_gi_profile(
                    gpu,
                    spec.index,
                    spec.id,
                    spec.name.encode(),
                    spec.compute_slices,
                    spec.count,
                    spec.sms,
                    spec.memory_mib,
                    spec.memory_slices,
                    starts,
                )
                == 0
            )

    def gi_count(self, gpu: int) -> int:
        """GPU instances that exist on *gpu*."""
        return int(self.lib.fake_gi_count(gpu))

    def mig_slot(self, gpu: int, mig_uuid: str) -> int:
        """The fake's index of the live MIG device *mig_uuid* of *gpu* (for add_process)."""
        slot = int(self.lib.fake_mig_slot(gpu, mig_uuid.encode()))
        assert slot >= 0, f"no live MIG device {mig_uuid} on GPU {gpu}"
        return slot

    def alive(self, gpu: int, mig_uuid: str) -> bool:
        """Whether MIG device *mig_uuid* exists on *gpu*."""
        return int(self.lib.fake_mig_slot(gpu, mig_uuid.encode())) >= 0

    def mig_memory(self, gpu: int, mig_uuid: str, used_mib: int) -> None:
        """Memory in use on the live MIG device *mig_uuid*."""
        assert self.lib.fake_set_mig_memory(gpu, self.mig_slot(gpu, mig_uuid), used_mib) == 0

    def clear_processes(self, gpu: int, *, mig: int = -1) -> None:
        assert self.lib.fake_clear_processes(gpu, mig) == 0

    def add_process(self, gpu: int, pid: int, used_mib: int, *, mig: int = -1) -> None:
        assert self.lib.fake_add_process(gpu, mig, pid, used_mib) == 0

    def push_xid(self, gpu: int, xid: int, *, gi: int = NO_INSTANCE, ci: int = NO_INSTANCE) -> None:
        assert self.lib.fake_push_event(gpu, EVENT_XID, xid, gi, ci) == 0

    def push_event(self, gpu: int, kind: int, data: int = 0) -> None:
        assert self.lib.fake_push_event(gpu, kind, data, NO_INSTANCE, NO_INSTANCE) == 0

    def fail(self, function: str, code: int, gpu: int = -1) -> None:
        """Make NVML *function* return *code* (for one GPU, or all); code 0 clears."""
        self.lib.fake_fail(function.encode(), gpu, code)

    def lose(self, gpu: int, lost: bool = True) -> None:
        self.set(gpu, "lost", int(lost))

    @property
    def init_count(self) -> int:
        return int(self.lib.fake_init_count())

    @property
    def thread_violations(self) -> int:
        return int(self.lib.fake_thread_violations())

    @property
    def pending_events(self) -> int:
        return int(self.lib.fake_pending_events())
