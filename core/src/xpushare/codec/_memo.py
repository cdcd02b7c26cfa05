"""The last values a codec encoded or decoded, by value and by object.

Why: the scheduler reads back what it wrote moments before. A bound pod's assignment is
encoded for the pod's annotation and again for the filter workers' stream, decoded by each
worker from the stream and by every process from the pod's watch event; a node's handoff is
encoded by the leader and decoded from the node's watch event. Each pass validates the whole
model (a fifth of a millisecond), for a value this process already holds as a model.

Safe because the models are frozen: a reader may hold the same object another holds, and
a value decodes to an equal model whoever decodes it. Only successes are remembered (a value
that fails is checked, and refused, every time). Bounded by count and by value size, so
nothing a pod or a node carries can grow it: at most :data:`MEMO_ENTRIES` values of at most
:data:`MEMO_VALUE_BYTES` each, 8 MiB per codec.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

#: The binds in flight (64 in kube-scheduler's benchmark shape, a few in a cluster) and a
#: wide margin: an entry is read back within seconds or never.
MEMO_ENTRIES = 1024
#: Longer values are never remembered: an assignment of a few devices or a handoff is a
#: few hundred bytes.
MEMO_VALUE_BYTES = 8192


class ValueMemo(Generic[M]):
    """value -> model and model -> value, for the last :data:`MEMO_ENTRIES` of each."""

    def __init__(self) -> None:
        self.by_value: OrderedDict[str, M] = OrderedDict()
        #: id() of a model -> (the model, its value); holding the model keeps its id from
        #: being reused while the entry lives.
        self.by_object: OrderedDict[int, tuple[M, str]] = OrderedDict()

    def remember(self, value: str, model: M) -> None:
        if len(value) > MEMO_VALUE_BYTES:
            return
        self.by_value[value] = model
        self.by_value.move_to_end(value)
        self.by_object[id(model)] = (model, value)
        self.by_object.move_to_end(id(model))
        while len(self.by_value) > MEMO_ENTRIES:
            self.by_value.popitem(last=False)
        while len(self.by_object) > MEMO_ENTRIES:
            self.by_object.popitem(last=False)

    def encoded(self, model: M) -> str | None:
        """The value *model* was encoded to or decoded from, if remembered."""
        found = self.by_object.get(id(model))
        return found[1] if found is not None and found[0] is model else None

    def decoded(self, value: object) -> M | None:
        """The model *value* was decoded to or encoded from, if remembered."""
        return self.by_value.get(value) if type(value) is str else None
