"""raw_watch: the loop the stand-in node agents and the benchmark's counter follow (the real
API server's side is in tests/realcluster: flow, faults, compaction and the benchmark)."""

from __future__ import annotations

import threading
from typing import Any

import orjson

from xpushare.testing.realcluster.rawwatch import raw_watch


class Stream:
    def __init__(self, lines: list[bytes]) -> None:
        self.lines = lines
        self.closed = False

    def __iter__(self) -> Any:
        return iter(self.lines)

    def close(self) -> None:
        self.closed = True


def event(kind: str, name: str, version: str) -> bytes:
    meta = {"name": name, "resourceVersion": version}
    return orjson.dumps({"type": kind, "object": {"metadata": meta}})


def gone() -> bytes:
    return orjson.dumps({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}})


class Lister:
    """Answers each call with the next of *answers* (a stream, or an exception to raise) and
    records its options; sets *stop* when none are left."""

    def __init__(self, answers: list[Stream | Exception], stop: threading.Event) -> None:
        self.answers = answers
        self.stop = stop
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **options: Any) -> Stream:
        self.calls.append(options)
        if len(self.calls) >= len(self.answers):
            self.stop.set()
        answer = self.answers[len(self.calls) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_events_are_handed_on_and_each_stream_resumes_from_the_last_version() -> None:
    stop = threading.Event()
    first = Stream([event("ADDED", "a", "5"), event("MODIFIED", "a", "7")])
    second = Stream([event("DELETED", "a", "9")])
    lister = Lister([first, second], stop)
    seen: list[tuple[str, str]] = []

    raw_watch(lister, lambda kind, obj, meta: seen.append((kind, meta["resourceVersion"])), stop)

    assert seen == [("ADDED", "5"), ("MODIFIED", "7"), ("DELETED", "9")]
    assert "resource_version" not in lister.calls[0]
    assert lister.calls[1]["resource_version"] == "7"
    assert all(call["watch"] is True for call in lister.calls)
    assert first.closed and second.closed


def test_gone_starts_again_from_the_current_objects_and_failures_are_retried() -> None:
    stop = threading.Event()
    lister = Lister(
        [
            Stream([event("ADDED", "a", "5"), gone(), event("ADDED", "never", "6")]),
            ConnectionError("the API server restarting"),
            Stream([event("ADDED", "a", "11")]),
        ],
        stop,
    )
    seen: list[str] = []

    raw_watch(lister, lambda kind, obj, meta: seen.append(meta["name"]), stop)

    # The event after the ERROR is not read: the stream is left at the error.
    assert seen == ["a", "a"]
    assert "resource_version" not in lister.calls[1]  # after 410: no version
    assert "resource_version" not in lister.calls[2]  # the failed call kept none either


def test_a_field_selector_and_the_stop_are_honoured() -> None:
    stop = threading.Event()
    stream = Stream([event("ADDED", "a", "1"), event("ADDED", "b", "2")])
    lister = Lister([stream, stream], stop)
    seen: list[str] = []

    def on(kind: str, obj: dict[str, Any], meta: dict[str, Any]) -> None:
        seen.append(meta["name"])
        stop.set()  # stop after the first event: the stream is left at once

    raw_watch(lister, on, stop, field_selector="spec.nodeName!=", timeout_s=3)

    assert seen == ["a"]
    assert lister.calls == [
        {
            "_preload_content": False,  # raw: no model objects
            "watch": True,
            "timeout_seconds": 3,
            "field_selector": "spec.nodeName!=",
        }
    ]
