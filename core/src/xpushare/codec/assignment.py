"""A pod's device assignment, as the scheduler writes it to the pod at bind.

Why on the pod: the assignment is the one record of which device slices a pod holds that
survives a scheduler restart (the usage ledger is rebuilt from it, DESIGN.md §7) and that the
node agent can read at Allocate. It therefore has to be read back exactly, or refused.
"""

from pydantic import ValidationError

from xpushare.codec import _safejson as sj
from xpushare.codec._memo import ValueMemo
from xpushare.codec.keys import ASSIGNMENT_KEY
from xpushare.models import PodAssignment

_HINT = (
    "the pod's devices cannot be counted from it; check the version and logs of the "
    "scheduler that bound the pod"
)

#: An assignment the scheduler wrote is read back at most seconds later (the pod's watch
#: event; a filter worker's mirrored reservation, then the same pod's watch event): every
#: bound pod's assignment crosses this codec three or four times in the scheduler.
_MEMO: ValueMemo[PodAssignment] = ValueMemo()


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
    known = _MEMO.decoded(value)
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
