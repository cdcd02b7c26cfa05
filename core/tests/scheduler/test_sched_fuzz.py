"""A fuzz run over the scheduler's real HTTP surface: never a 5xx, never a hang, and a 4xx
changes nothing.

A scheduler (extender, webhook, probes) runs in-process on its own event loop in a thread,
against the fake API server, with a few GPU nodes, pods and bound pods. Hypothesis sends it
raw HTTP/1.1 over loopback sockets: the verbs' real shapes (ExtenderArgs with a Pod or a
NodeList, ExtenderBindingArgs, AdmissionReview) with mutated fields, wrong types, huge and
odd strings and numbers, quantity-like strings, random JSON, bytes that are not JSON, odd
methods, paths and headers (content codings, chunked bodies, lengths that lie,
``Expect: 100-continue``). The properties, for every request:

- it is answered, within ``REQUEST_TIMEOUT_S``, with a 2xx or a 4xx;
- after a 4xx, the usage ledger (entries, reservations, device usage), the cluster state
  (nodes, pods, handoffs) and the fake API server (its objects and the writes it recorded,
  events included) are what they were before the request.

The default run is short and reproducible (``DEFAULT_EXAMPLES``, derandomized), for CI. A
longer, randomized run on demand::

    XPUSHARE_FUZZ_EXAMPLES=5000 uv run pytest core/tests/scheduler/test_sched_fuzz.py -q

``XPUSHARE_FUZZ_NO_QUANTITIES=1`` leaves out the quantity-like strings (``1e999999``, ...)
whose parsing is fixed elsewhere, to fuzz the rest on a branch without that fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import http.client
import json
import os
import socket
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from sched_helpers import CORES, GPU, MEM, PCT, Running, gpu_node, gpu_pod, start_scheduler

from xpushare.codec import ASSIGNMENT_KEY, HANDOFF_KEY
from xpushare.testing.apiserver import FakeApiServer
from xpushare.testing.handoffs import handoff_lease, set_handoff

#: Examples of the default run: about 20-30 s on the shared 2-core development machine.
DEFAULT_EXAMPLES = 600
EXAMPLES = int(os.environ.get("XPUSHARE_FUZZ_EXAMPLES", "0") or 0)
NO_QUANTITIES = os.environ.get("XPUSHARE_FUZZ_NO_QUANTITIES", "") not in ("", "0")
#: A request not answered within this is a hang: bind waits at most bind.wait_s (0.3 s
#: here), a body that lies about its length at most server.body_timeout_s (1 s here).
REQUEST_TIMEOUT_S = 5.0
#: The state must be quiet (events sent, watches caught up) within this before a snapshot.
SETTLE_TIMEOUT_S = 10.0

NODES = ("node-0", "node-1", "node-2")
POD_NAMES = ("free-a", "free-b", "free-c", "bound-0", "bound-1", "plain")
WEBHOOK_PATH = "/mutate"


# -- the scheduler, on a loop of its own ---------------------------------------------------------


@dataclass
class Live:
    """A running scheduler on an event loop in a thread; the test thread talks HTTP to it."""

    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    api: FakeApiServer
    running: Running

    @property
    def port(self) -> int:
        return self.running.scheduler.ports["main"]

    def call(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)


def _populate(api: FakeApiServer) -> None:
    api.put("nodes", gpu_node("node-0", "8x A100-80GB"))
    api.put("nodes", gpu_node("node-1", "4x A10-24GB"))
    api.put("nodes", gpu_node("node-2", "2x T4-16GB"))
    for name in ("free-a", "free-b", "free-c"):
        api.put("pods", gpu_pod(name, gpu="1", mem="8000"))
    api.put("pods", gpu_pod("plain"))


def _release(api: FakeApiServer, node: str) -> None:
    """What the device plugin does after Allocate: the node's handoff is free again (a node
    never bound to has no handoff Lease, and the device plugin creates none)."""
    if handoff_lease(api, node) is not None:
        set_handoff(api, node, {HANDOFF_KEY: None})


async def _bind_two(running: Running, api: FakeApiServer) -> None:
    """Two pods bound through the real verbs, so the ledger holds entries to protect."""
    async with aiohttp.ClientSession() as http:
        for name, node in (("bound-0", "node-0"), ("bound-1", "node-1")):
            obj = api.put("pods", gpu_pod(name, gpu="1", mem="4000"))
            await running.settle(api)
            await running.post(http, "filter", {"Pod": obj, "NodeNames": [node]})
            meta = obj["metadata"]
            result = await running.post(
                http,
                "bind",
                {
                    "PodName": name,
                    "PodNamespace": "default",
                    "PodUID": meta["uid"],
                    "Node": node,
                },
            )
            assert result == {"Error": ""}, result
            _release(api, node)
    await running.settle(api)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzzed-scheduler", daemon=True)
    thread.start()

    async def start() -> tuple[FakeApiServer, Running]:
        api = await FakeApiServer().start()
        _populate(api)
        running = await start_scheduler(
            api,
            **{
                "bind.wait_s": 0.3,
                # No periodic repair: it would change handoffs between two snapshots.
                "bind.repair_interval_s": 3600,
                "server.header_timeout_s": 2.0,
                "server.body_timeout_s": 1.0,
            },
        )
        await _bind_two(running, api)
        return api, running

    api, running = asyncio.run_coroutine_threadsafe(start(), loop).result(60)
    state = Live(loop, thread, api, running)
    try:
        yield state
    finally:

        async def stop() -> None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(running.close(), 10)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(api.stop(), 10)
            current = asyncio.current_task()
            for task in asyncio.all_tasks():
                if task is not current:
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        if not thread.is_alive():
            loop.close()


async def _snapshot(live: Live) -> Any:
    """Everything a request could change, once background work has settled."""
    sched = live.running.scheduler
    await sched.events.flush(SETTLE_TIMEOUT_S)
    await live.running.settle(live.api, SETTLE_TIMEOUT_S)
    ledger = sched.ledger
    cluster = sched.cluster
    return copy.deepcopy(
        {
            "ledger": ledger.snapshot(),
            "entries": sorted(
                (e.key, e.node, e.reserved, e.charges, e.cpu_milli, e.memory_mib)
                for e in ledger.entries()
            ),
            "nodes": {n: (r.resource_version, r.memory_sizes) for n, r in cluster.nodes.items()},
            "handoffs": {
                n: (r.resource_version, r.raw, r.term, r.error)
                for n, r in cluster.handoff_book.records.items()
            },
            "pods": {k: (r.node, r.started, r.raw) for k, r in cluster.pods.items()},
            "api_objects": json.dumps(
                {"/".join(str(p) for p in k): v for k, v in live.api.objects.items()},
                sort_keys=True,
                default=str,
            ),
            "api_writes": [
                (w.method, w.path, json.dumps(w.body, sort_keys=True, default=str))
                for w in live.api.writes()
            ],
            "events_sent": sched.events.sent,
        }
    )


# -- what is sent --------------------------------------------------------------------------------

#: Strings shaped like Kubernetes quantities, the edge cases among them.
QUANTITY_LIKE = (
    "1e999999",
    "1e-999999",
    "9" * 5000,
    "1E+308",
    "1Ei",
    "8Ei",
    "0.5",
    "-1",
    "+3",
    "1e3",
    "100m",
    "0x10",
    " 2 ",
    "1.5Gi",
    "NaN",
    "Infinity",
    "\u0661",  # an Arabic-Indic digit one: str.isdigit() says yes
    "2" * 30 + "Ki",
)


def _text() -> st.SearchStrategy[str]:
    odd = st.sampled_from(
        ["", " ", "\x00", "\u202e", "é" * 50, "default", "node-0", "../etc", "a" * 70_000]
    )
    return st.one_of(st.text(max_size=30), odd)


def _numbers() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from([0, -0.0, 1e308, -1e308, 5e-324, 10**4000, 2**63, 2**64 + 1]),
        st.floats(allow_nan=True, allow_infinity=True),
    )


def _quantities() -> st.SearchStrategy[Any]:
    plain = st.one_of(
        st.sampled_from(["1", "2", "8000", "50", "100", "0"]),
        st.integers(min_value=-5, max_value=200_000).map(str),
    )
    if NO_QUANTITIES:
        return plain
    return st.one_of(plain, st.sampled_from(QUANTITY_LIKE), _numbers())


def _json_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), _numbers(), _text())
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.text(max_size=10), children, max_size=4),
        ),
        max_leaves=12,
    )


def _hostile() -> st.SearchStrategy[Any]:
    """What a mutated field becomes."""
    return st.one_of(_json_values(), _quantities(), st.just([]), st.just({}), st.just(None))


@st.composite
def _pods(draw: st.DrawFn) -> dict[str, Any]:
    names = st.sampled_from(POD_NAMES) | _text()
    resources = {
        draw(st.sampled_from([GPU, MEM, PCT, CORES, "cpu", "memory", "nvidia.com/gpu"])): draw(
            _quantities()
        )
        for _ in range(draw(st.integers(0, 4)))
    }
    containers = [
        {
            "name": draw(_text()),
            "image": "busybox",
            "resources": {draw(st.sampled_from(["limits", "requests"])): resources},
            "env": [
                {
                    "name": draw(
                        st.sampled_from(["CUDA_DISABLE_CONTROL", "X", "NVIDIA_VISIBLE_DEVICES"])
                    ),
                    "value": draw(_text()),
                }
                for _ in range(draw(st.integers(0, 2)))
            ],
        }
        for _ in range(draw(st.integers(1, 3)))
    ]
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["initContainers"] = copy.deepcopy(containers[:1])
    if draw(st.integers(0, 5)) == 0:
        spec["nodeName"] = draw(st.sampled_from(NODES))
    if draw(st.booleans()):
        spec["schedulerName"] = draw(st.sampled_from(["xpushare-scheduler", "default-scheduler"]))
    annotations = {}
    if draw(st.integers(0, 4)) == 0:
        annotations[ASSIGNMENT_KEY] = draw(_text())
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": draw(names),
            "namespace": draw(st.sampled_from(["default", "kube-system"]) | _text()),
            "uid": draw(st.sampled_from(["", "u-1"]) | _text()),
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded"]))},
    }


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*prefix, index))


@st.composite
def _mutated(draw: st.DrawFn, base: Any) -> Any:
    """*base* with up to three fields replaced by hostile values or removed."""
    value = copy.deepcopy(base)
    for _ in range(draw(st.integers(0, 3))):
        paths = list(_paths(value))
        path = draw(st.sampled_from(paths))
        replacement = draw(_hostile())
        if not path:
            return replacement
        parent = value
        for part in path[:-1]:
            parent = parent[part]
        if isinstance(parent, dict) and draw(st.integers(0, 3)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = replacement
    return value


@st.composite
def _extender_args(draw: st.DrawFn) -> Any:
    pod = draw(_pods())
    if draw(st.booleans()):
        names = draw(st.lists(st.sampled_from(NODES) | _text(), max_size=5))
        args: dict[str, Any] = {"Pod": pod, "Nodes": None, "NodeNames": names}
    else:
        items = [gpu_node(n) for n in draw(st.lists(st.sampled_from(NODES), max_size=3))]
        args = {"Pod": pod, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    return draw(_mutated(args))


@st.composite
def _binding_args(draw: st.DrawFn) -> Any:
    args = {
        "PodName": draw(st.sampled_from(POD_NAMES) | _text()),
        "PodNamespace": draw(st.sampled_from(["default", ""]) | _text()),
        "PodUID": draw(st.just("") | _text()),
        "Node": draw(st.sampled_from(NODES) | _text()),
    }
    return draw(_mutated(args))


@st.composite
def _reviews(draw: st.DrawFn) -> Any:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": draw(st.sampled_from(["req-1"]) | _text()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": draw(st.sampled_from(["default", "kube-system"]) | _text()),
            "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE"])),
            "userInfo": {"username": "fuzz"},
            "object": draw(_pods()),
            "oldObject": None,
            "dryRun": False,
        },
    }
    return draw(_mutated(review))


def _encode(value: Any) -> bytes:
    # NaN and Infinity are written as such (not JSON, but Python's json reads them, so the
    # server sees them as floats and must cope).
    return json.dumps(value).encode()


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    chunked: bool
    #: The Content-Length sent minus the body's real length (a lie when not 0).
    length_lie: int

    def raw(self) -> bytes:
        lines = [f"{self.method} {self.path} HTTP/1.1", "Host: 127.0.0.1"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        if self.chunked:
            lines.append("Transfer-Encoding: chunked")
            payload = b"".join(
                b"%x\r\n%s\r\n" % (len(part), part)
                for part in (self.body[i : i + 4096] for i in range(0, len(self.body), 4096))
            )
            payload += b"0\r\n\r\n"
        else:
            lines.append(f"Content-Length: {max(0, len(self.body) + self.length_lie)}")
            payload = self.body
        return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + payload


_VERB_BODIES = {
    "/filter": _extender_args(),
    "/prioritize": _extender_args(),
    "/bind": _binding_args(),
    WEBHOOK_PATH: _reviews(),
}

_HEADERS = st.lists(
    st.one_of(
        st.tuples(
            st.just("Content-Encoding"),
            st.sampled_from(
                ["identity", "gzip", "deflate", "br", "x-garbage", "", "identity, gzip"]
            ),
        ),
        st.tuples(
            st.just("Content-Type"),
            st.sampled_from(["application/json", "text/plain", "", "application/json; charset=x"]),
        ),
        st.tuples(st.just("Connection"), st.sampled_from(["close", "keep-alive", "upgrade", "x"])),
        st.tuples(st.just("Expect"), st.sampled_from(["100-continue", "x"])),
        st.tuples(st.just("Accept-Encoding"), st.sampled_from(["gzip", "*", "identity;q=0"])),
        st.tuples(
            st.sampled_from(["X-Fuzz", "Authorization", "Cookie"]),
            st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=200),
        ),
    ),
    min_size=1,
    max_size=2,
)


_VERB_PATHS = (*_VERB_BODIES, f"{WEBHOOK_PATH}?timeout=10s")
_OTHER_PATHS = ("/healthz", "/readyz", "/metrics", "/", "/filter/", "/nope", "/%zz", "/bind?x=1")
_METHODS = ("GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "FUZZ", "POST")


@st.composite
def requests(draw: st.DrawFn) -> Request:
    # Mostly what kube-scheduler and the API server send, so the verbs' own checks are
    # reached; the rest is any method on any path.
    if draw(st.integers(0, 9)) < 7:
        method, path = "POST", draw(st.sampled_from(_VERB_PATHS))
    else:
        method = draw(st.sampled_from(_METHODS))
        path = draw(st.sampled_from(_VERB_PATHS + _OTHER_PATHS))
    verb = path.split("?", 1)[0]
    kind = draw(st.integers(0, 9))
    if verb in _VERB_BODIES and kind < 7:
        body = _encode(draw(_VERB_BODIES[verb]))
    elif kind < 9:
        body = _encode(draw(_json_values()))
    else:
        body = draw(
            st.binary(max_size=300) | st.sampled_from([b"", b"{", b"\xff\xfe", b"[" * 50_000])
        )
    headers = draw(st.just([]) | _HEADERS)
    names = {name.lower() for name, _ in headers}
    # Connection: close makes every answer end with the connection; keep-alive answers are
    # read by their length all the same.
    if "connection" not in names:
        headers.append(("Connection", "close"))
    chunked = draw(st.integers(0, 7)) == 0
    # A length that lies costs a body timeout (1 s here) when it claims more: rare.
    lie = 0 if chunked or draw(st.integers(0, 15)) else draw(st.sampled_from([-5, -1, 3, 40]))
    return Request(method, path, tuple(headers), body, chunked, lie)


def send(live: Live, request: Request) -> int:
    """The status of the answer to *request*; fails on a hang or a connection closed unanswered."""
    with socket.create_connection(("127.0.0.1", live.port), timeout=REQUEST_TIMEOUT_S) as sock:
        sock.sendall(request.raw())
        response = http.client.HTTPResponse(sock, method=request.method)
        try:
            response.begin()
            response.read()
        except TimeoutError:
            pytest.fail(f"no answer within {REQUEST_TIMEOUT_S} s to {request.raw()[:2000]!r}")
        except (http.client.HTTPException, ConnectionError) as exc:
            pytest.fail(f"connection closed unanswered ({exc!r}) for {request.raw()[:2000]!r}")
        finally:
            response.close()
        return response.status


def _post(path: str, body: bytes, *headers: tuple[str, str]) -> Request:
    return Request("POST", path, (*headers, ("Connection", "close")), body, False, 0)


#: The cases of issue 13 (defect 6), always run first: JSON that is no object on each verb,
#: a content coding on a plain body, and a quantity too large to compute with.
KNOWN = [
    _post("/filter", b"[]"),
    _post("/prioritize", b'"x"'),
    _post("/bind", b"null"),
    _post(WEBHOOK_PATH, b"true"),
    _post("/filter", b'{"Pod": 5, "NodeNames": "x", "Nodes": []}'),
    _post("/prioritize", b'{"Pod": {}, "NodeNames": []}', ("Content-Encoding", "gzip")),
]
if not NO_QUANTITIES:
    KNOWN.append(
        _post("/filter", _encode({"Pod": gpu_pod("q", gpu="1", mem="1e999999"), "NodeNames": []}))
    )


# -- the property --------------------------------------------------------------------------------


def _known(test: Any) -> Any:
    for request in KNOWN:
        test = example(request=request)(test)
    return test


@pytest.mark.timeout(120 + EXAMPLES // 5)
@settings(
    max_examples=EXAMPLES or DEFAULT_EXAMPLES,
    derandomize=not EXAMPLES,
    deadline=None,
    database=None,
    print_blob=True,
    # The short run does not shrink: a hang costs a request timeout per shrinking step;
    # run it longer (XPUSHARE_FUZZ_EXAMPLES) to get a shrunk example.
    phases=tuple(Phase) if EXAMPLES else (Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(request=requests())
@_known
def test_every_request_is_answered_2xx_or_4xx_and_a_4xx_changes_nothing(live, request):
    before = live.call(_snapshot(live))
    status = send(live, request)
    assert 200 <= status < 300 or 400 <= status < 500, (status, request.raw()[:2000])
    if 400 <= status < 500:
        after = live.call(_snapshot(live))
        changed = sorted(k for k in before if before[k] != after[k])
        assert not changed, (status, changed, request.raw()[:2000])


def test_the_snapshot_sees_what_a_bind_changes_and_the_scheduler_still_works(live):
    """Runs after the fuzzing: a plain pod is filtered and bound, and the snapshot sees it."""
    assert send(live, Request("GET", "/healthz", (("Connection", "close"),), b"", False, 0)) == 200

    async def create() -> dict[str, Any]:
        # Play the device plugin for the binds the fuzzing made, so node-0's handoff is free.
        for node in NODES:
            _release(live.api, node)
        return live.api.put("pods", gpu_pod("late", gpu="1"))

    late = live.call(create())
    before = live.call(_snapshot(live))
    assert send(live, _post("/filter", _encode({"Pod": late, "NodeNames": ["node-0"]}))) == 200
    meta = late["metadata"]
    bind = {"PodName": "late", "PodNamespace": "default", "PodUID": meta["uid"], "Node": "node-0"}
    assert send(live, _post("/bind", _encode(bind))) == 200
    after = live.call(_snapshot(live))
    assert before["entries"] != after["entries"]
    assert before["api_writes"] != after["api_writes"]
    assert before["handoffs"] != after["handoffs"]  # the handoff
