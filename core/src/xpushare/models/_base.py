"""The shared base of every model: strict about unknown fields, immutable.

Frozen models can be shared between the event loop, the vendor threads and the usage ledger
without copies or locks; ``extra="forbid"`` turns a misspelled field from a plugin into a
validation error that names it instead of a silently ignored value.
"""

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)
