"""The per-node handoff: which pod the node's device plugins serve between bind and Allocate.

Why it exists: kubelet's Allocate carries no pod identity, so the scheduler tells the node
agent at bind which pod comes next (DESIGN.md §6). Unlike HAMi's node lock it records which
vendors still have to allocate, so it is released the moment the last one has, and it
carries its own expiry, so a pod that never reaches Allocate cannot block the node for
long and nobody has to edit the annotation by hand.
"""

from collections.abc import Iterable
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from xpushare.codec import _safejson as sj
from xpushare.codec._memo import ValueMemo
from xpushare.codec.keys import HANDOFF_KEY, MAX_TERM
from xpushare.models import PodRef

_HINT = "it expires on its own; check the version and logs of the scheduler that wrote it"


class Handoff(BaseModel):
    """The pod a node is handed, the vendors it waits for, and until when.

    ``vendors`` and ``allocated`` are kept sorted, so equal handoffs encode equally;
    times are Unix seconds on the writer's clock (a reader bounds them by its own, see
    :meth:`expires_for`). ``term`` is the fencing token of the scheduler replica that wrote
    it (0: written without leader election).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)

    pod: PodRef
    vendors: tuple[str, ...] = Field(min_length=1)
    allocated: tuple[str, ...] = ()
    since: float = Field(ge=0, allow_inf_nan=False)
    expires: float = Field(ge=0, allow_inf_nan=False)
    term: int = Field(default=0, ge=0, le=MAX_TERM)

    @field_validator("vendors", "allocated")
    @classmethod
    def _sorted_unique(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not name:
                raise ValueError("vendor names must not be empty")
        if len(set(names)) != len(names):
            raise ValueError(f"a vendor appears twice in {list(names)}")
        return tuple(sorted(names))

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not self.pod.name:
            raise ValueError("the pod has no name")
        stray = set(self.allocated) - set(self.vendors)
        if stray:
            raise ValueError(f"allocated vendors {sorted(stray)} are not among {self.vendors}")
        if self.expires < self.since:
            raise ValueError(f"expires ({self.expires}) is before since ({self.since})")
        return self

    @classmethod
    def begin(
        cls, pod: PodRef, vendors: Iterable[str], *, now: float, ttl_s: float, term: int = 0
    ) -> Self:
        """A fresh handoff of *pod* at *now*, expiring *ttl_s* seconds later."""
        return cls(pod=pod, vendors=tuple(vendors), since=now, expires=now + ttl_s, term=term)

    def expired(self, now: float) -> bool:
        """True from the moment *now* (Unix seconds) reaches ``expires``."""
        return now >= self.expires

    def expires_for(self, seen_at: float, ttl_s: float) -> float:
        """When a reader that first saw this handoff at *seen_at* (its own clock) must take it
        as expired: never later than *ttl_s* after it saw it.

        Why: ``since`` and ``expires`` are the writer's clock and the writer's word. A skewed
        clock or a hand-edited annotation (an expiry a year ahead, a start in the future)
        must not block a node for longer than the configured lifetime.
        """
        return min(self.expires, seen_at + ttl_s)

    def complete(self) -> bool:
        """True when every vendor of the pod has allocated: the handoff can be released."""
        return set(self.allocated) == set(self.vendors)

    def with_allocated(self, vendor: str) -> Self:
        """This handoff with *vendor* recorded as allocated (idempotent).

        Raises ValueError when *vendor* is not one the pod waits for: the Allocate being
        served is not this pod's.
        """
        if vendor not in self.vendors:
            raise ValueError(
                f"vendor {vendor!r} is not part of the handoff of pod {self.pod} "
                f"(vendors {list(self.vendors)})"
            )
        if vendor in self.allocated:
            return self
        return type(self)(
            pod=self.pod,
            vendors=self.vendors,
            allocated=(*self.allocated, vendor),
            since=self.since,
            expires=self.expires,
            term=self.term,
        )


#: A handoff the leader wrote is read back from the node's watch event moments later.
_MEMO: ValueMemo[Handoff] = ValueMemo()


def encode_handoff(handoff: Handoff, *, node: str | None = None) -> str:
    """The value of ``xpushare.io/handoff``; *node* names errors."""
    if type(handoff) is Handoff:
        known = _MEMO.encoded(handoff)
        if known is not None:
            return known
    what = sj.describe(HANDOFF_KEY, node=node)
    if not isinstance(handoff, Handoff):
        sj.fail(what, f"expected a Handoff, got {type(handoff).__name__}", "a caller bug")
    try:
        checked = Handoff.model_validate(handoff.model_dump())
    except ValidationError as exc:
        sj.fail(what, f"refusing to write {sj.validation_problem(exc)}", "a scheduler bug")
    what = sj.describe(HANDOFF_KEY, node=node, pod=str(checked.pod))
    wire = {"v": sj.FORMAT_VERSION, **checked.model_dump(mode="json")}
    value = sj.write(wire, what, "the pod's name or vendor list is unreasonably long")
    if type(handoff) is Handoff and checked == handoff:
        _MEMO.remember(value, handoff)
    return value


def decode_handoff(value: str, *, node: str | None = None) -> Handoff:
    """Read ``xpushare.io/handoff``; *node* names errors."""
    known = _MEMO.decoded(value)
    if known is not None:
        return known
    what = sj.describe(HANDOFF_KEY, node=node)
    data = sj.load_json(value, what, _HINT)
    fields = sj.split_version(data, what, _HINT)
    handoff = sj.validate(Handoff, fields, what, _HINT)
    _MEMO.remember(value, handoff)
    return handoff
