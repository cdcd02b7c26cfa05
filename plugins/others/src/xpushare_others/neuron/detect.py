"""Neuron detection: the devices the driver publishes in sysfs, named as HAMi names them.

A device's share slots and compute units are its NeuronCores (a container takes at least
one core); its memory is not published in sysfs and is left 0, as HAMi's inventory has it.
"""

from __future__ import annotations

from pathlib import Path

from xpushare.errors import VendorUnavailable
from xpushare.models import Device
from xpushare_others.neuron import sysfs
from xpushare_others.neuron.config import MAX_CORES, VENDOR, NeuronConfig


def root(config: NeuronConfig) -> Path:
    return Path(config.sysfs_root, config.sysfs_devices)


def check_present(config: NeuronConfig) -> None:
    """Raise VendorUnavailable, naming the directory, when the Neuron driver is not loaded."""
    path = root(config)
    try:
        found = sysfs.device_dirs(path)
    except OSError as exc:
        # Cause first, then one short action: `xpushare detect` shows "cause: action" in
        # 80 columns (the path and the rest are for --verbose).
        raise VendorUnavailable(
            VENDOR,
            f"no Neuron driver: {path} cannot be read ({exc.strerror or exc}). Load "
            "aws-neuronx-dkms or set sysfs_root; it must point at the host's /sys.",
        ) from None
    if not found:
        raise VendorUnavailable(
            VENDOR,
            f"no Neuron device: {path} lists no neuron<N> device. Use an Inferentia or "
            "Trainium instance.",
        )


def device_id(node: str, index: int) -> str:
    """HAMi's ``<node>-AWSNeuron-<index>``, what HAMi's pod annotations name."""
    return f"{node}-AWSNeuron-{index}"


def detect(config: NeuronConfig, node: str) -> list[Device]:
    devices: list[Device] = []
    for index, path in sysfs.device_dirs(root(config)):
        facts = sysfs.device(index, path, MAX_CORES)
        host_node = config.on_host(f"/dev/neuron{index}")
        extra: dict[str, str] = {}
        healthy = facts is not None and host_node.exists()
        if facts is None:
            extra["state"] = "core_count unreadable"
        elif not healthy:
            extra["state"] = f"no device node /dev/neuron{index}"
        n = facts.cores if facts else 1
        if facts:
            extra["cores"] = str(facts.cores)
            if facts.instance_type:
                extra["instance_type"] = facts.instance_type
            if facts.connected:
                extra["connected"] = ",".join(map(str, facts.connected))
        instance = config.instance_type
        if instance:
            extra["instance_type"] = instance
        devices.append(
            Device(
                vendor=VENDOR,
                id=device_id(node, index),
                index=index,
                model=(facts.name if facts and facts.name else "AWS Neuron"),
                memory_mib=0,
                compute_units=n,
                share_slots=n,
                healthy=healthy,
                mode="cores",
                extra=extra,
            )
        )
    return devices
