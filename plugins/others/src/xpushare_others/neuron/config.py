"""The AWS Neuron vendor's settings (``XPUSHARE_AWSNEURON_CONFIG`` and the agent's section).

HAMi's ``AWSNeuron`` backend (hami-protocol.md §8.1): whole devices as ``aws.amazon.com/neuron``
or NeuronCores as ``aws.amazon.com/neuroncore``. The vendor is named ``awsneuron`` as the core's
HAMi key table names it, so the pods HAMi placed are counted against the same devices.
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from xpushare.models import ResourceNames
from xpushare_others.common.settings import VendorConfig

VENDOR: Final = "awsneuron"
CORE_RESOURCE: Final = "aws.amazon.com/neuroncore"
#: The core count takes the ``compute`` name so the webhook routes core-only containers here;
#: this vendor's parser reads it as NeuronCores (HAMi's unit), not as a percent. The core's
#: webhook bounds a compute value at 100, which bounds a core request at 100 cores.
NAMES: Final = ResourceNames(count="aws.amazon.com/neuron", compute=CORE_RESOURCE)
#: NeuronCores per device HAMi assumes when it splits a core request (maxCoresPerNeuronDevice:
#: its bitmask code handles two); trn1 and inf2 devices have two.
HAMI_CORES_PER_DEVICE: Final = 2
#: Most cores one device may have: a bitmask of this many bits (trn2 has 8 physical cores).
MAX_CORES: Final = 32


class NeuronConfig(VendorConfig):
    #: Where the Neuron driver publishes its devices, under ``sysfs_root``.
    sysfs_devices: str = "devices/virtual/neuron_device"
    #: NeuronCores per device, used where no node is known (the webhook splits a core request
    #: into devices with it): set it to your instances' (``neuron-ls``), e.g. 4 for trn2 at LNC 2.
    cores_per_device: int = Field(default=HAMI_CORES_PER_DEVICE, ge=1, le=MAX_CORES)
    #: The instance type when neither the node's ``node.kubernetes.io/instance-type`` label nor
    #: the driver names it (it decides the contiguous blocks of devices).
    instance_type: str | None = None
    #: Variable the Neuron runtime reads for the cores it may use.
    visible_cores_env: str = "NEURON_RT_VISIBLE_CORES"

    def names(self) -> ResourceNames:
        return self.resource_names if self.resource_names is not None else NAMES

    @property
    def core_resource(self) -> str:
        """Resource of NeuronCore requests (HAMi's ``resourceCoreName``)."""
        return self.names().compute or CORE_RESOURCE
