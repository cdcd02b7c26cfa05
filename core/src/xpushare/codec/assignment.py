"""A pod's device assignment, as the scheduler writes it to the pod at bind.

Why on the pod: the assignment is the one record of which device slices a pod holds that
survives a scheduler restart (the usage ledger is rebuilt from it, DESIGN.md §7) and that the
node agent can read at Allocate. It therefore has to be read back exactly, or refused.
"""

from collections import OrderedDict

from pydantic import ValidationError

from xpushare.codec import _safejson as sj
from xpushare.codec.keys import ASSIGNMENT_KEY
from xpushare.models import PodAssignment

_HINT = (
    "the pod's devices cannot be counted from it; check the version and logs of the "
    "scheduler that bound the pod"
)

#: Values remembered by :class:`_Memo`: an assignment the scheduler wrote is read back
#: at most seconds later (the pod's watch event; a filter worker's mirrored reservation,
#: then the same pod's watch event), so the binds in flight and a margin are enough.
MEMO_ENTRIES = 1024
#: Longer values are never remembered, so the memo holds at most MEMO_ENTRIES x this
#: (8 MiB) whatever pods carry: an assignment of a few devices is a few hundred bytes.
MEMO_VALUE_BYTES = 8192


class _Memo:
    """The last assignments encoded or decoded, by value and by object.

    Why: every bound pod's assignment crosses this codec three or four times in the
    scheduler: encoded for the pod's annotation and again for the filter workers' stream,
    decoded by each worker from the stream, and decoded again by every process from the
    pod's watch event. Each pass validates the whole model (a fifth of a millisecond), for
    a value the process encoded or decoded itself moments before. Safe to share because
    the models are frozen: a reader can hold the same object another holds, and a value
    decodes to an equal assignment whoever decodes it. Only successes are remembered; a
    value that fails is checked (and refused) every time. Bounded by count and by value
    size, so a pod cannot grow it.
    """

    def __init__(self) -> None:
        self.by_value: OrderedDict[str, PodAssignment] = OrderedDict()
        #: id() of an assignment -> (the assignment, its value); holding the assignment keeps
        #: its id from being reused while the entry lives.
        self.by_object: OrderedDict[int, tuple[PodAssignment, str]] = OrderedDict()

    def remember(self, value: str, assignment: PodAssignment) -> None:
        if len(value) > MEMO_VALUE_BYTES:
            return
        self.by_value[value] = assignment
        self.by_value.move_to_end(value)
        self.by_object[id(assignment)] = (assignment, value)
        self.by_object.move_to_end(id(assignment))
        while len(self.by_value) > MEMO_ENTRIES:
            self.by_value.popitem(last=False)
        while len(self.by_object) > MEMO_ENTRIES:
            self.by_object.popitem(last=False)

    def encoded(self, assignment: PodAssignment) -> str | None:
        found = self.by_object.get(id(assignment))
        return found[1] if found is not None and found[0] is assignment else None


_MEMO = _Memo()


def encode_assignment(assignment: PodAssignment, *, pod: str | None = None) -> str:
    """The value of ``xpushare.io/assignment``; *pod* (``namespace/name``) names errors."""
    if type(assignment) is PodAssignment:
        known = _MEMO.encoded(assignment)
        if known is not None:
            return known
    what = sj.describe(ASSIGNMENT_KEY, pod=pod)
    if not isinstance(assignment, PodAssignment):
        sj.fail(what, f"expected a PodAssignment, got {type(assignment).__name__}", "a caller bug")
    try:
        # Re-validating catches a model built with model_construct or mutated around pydantic.
        checked = PodAssignment.model_validate(assignment.model_dump())
    except ValidationError as exc:
        sj.fail(what, f"refusing to write {sj.validation_problem(exc)}", "a scheduler bug")
    what = sj.describe(ASSIGNMENT_KEY, node=checked.node, pod=pod)
    hint = (
        f"the pod has {len(checked.containers)} container assignments, too many to record: "
        "split the pod"
    )
    value = sj.write({"v": sj.FORMAT_VERSION, **checked.model_dump(mode="json")}, what, hint)
    if type(assignment) is PodAssignment and checked == assignment:
        # What is read back from this value is this very object: the pod's watch event
        # then finds the one the scheduler booked.
        _MEMO.remember(value, assignment)
    return value


def decode_assignment(value: str, *, pod: str | None = None) -> PodAssignment:
    """Read ``xpushare.io/assignment``; *pod* (``namespace/name``) names errors."""
    known = _MEMO.by_value.get(value) if type(value) is str else None
    if known is not None:
        return known
    what = sj.describe(ASSIGNMENT_KEY, pod=pod)
    data = sj.load_json(value, what, _HINT)
    fields = sj.split_version(data, what, _HINT)
    node = fields.get("node")
    if isinstance(node, str) and node:
        what = sj.describe(ASSIGNMENT_KEY, node=node, pod=pod)
    assignment = sj.validate(PodAssignment, fields, what, _HINT)
    _MEMO.remember(value, assignment)
    return assignment
