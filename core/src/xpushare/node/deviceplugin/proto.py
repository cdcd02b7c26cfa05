"""The generated v1beta1 message and service modules, typed as ``Any`` for the rest of us.

Why: the generated ``_pb2_grpc`` module is untyped and its messages are built at import
time, so mypy --strict sees neither; importing them here once, as ``Any``, keeps that
looseness in one line instead of a type-ignore at every use.
"""

from typing import Any

from xpushare.node._proto import deviceplugin_v1beta1_pb2 as _pb
from xpushare.node._proto import deviceplugin_v1beta1_pb2_grpc as _pb_grpc

#: Messages: ``pb.Device(ID=..., health=...)``, ``pb.AllocateRequest(...)``, ...
pb: Any = _pb
#: Services: ``pb_grpc.DevicePluginServicer``, ``pb_grpc.RegistrationStub``, ...
pb_grpc: Any = _pb_grpc
