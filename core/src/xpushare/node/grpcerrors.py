"""Error text that fits through gRPC's status: short, whatever the request held.

Why: a gRPC status message travels in the trailing metadata (``grpc-message``), and every
implementation caps the metadata it accepts: gRPC C-core (the Python client, our fake
kubelet) warns past 8 KiB (``GRPC_ARG_MAX_METADATA_SIZE``) and drops the stream past 16 KiB.
An error that quotes the whole request (an Allocate of 100,000 device IDs once made a 1 MB
message) is dropped on the way: the caller sees
RESOURCE_EXHAUSTED "Stream removed" instead of the code and the reason, and kubelet's event on
the pod says nothing useful. So errors name a list by its size and first few items, and the
device-plugin and DRA servers cut whatever they send to :data:`MAX_STATUS_CHARS` (DRA's
per-claim errors travel in the response body, but end in kubelet's event on the pod all the
same).
"""

from __future__ import annotations

from collections.abc import Sequence

#: The most characters of a status message sent: an eighth of C-core's 8 KiB soft limit, so
#: a message of non-ASCII characters (UTF-8, then percent-encoded: up to 12 bytes each) still
#: stays under the hard limit beside the other trailers.
MAX_STATUS_CHARS = 1024

#: How many items of a list an error quotes: enough to recognise the devices involved.
SHOWN_ITEMS = 3

#: The most characters of one quoted item (a device ID is under 100; a bogus one may be huge).
MAX_ITEM_CHARS = 80


def _item(value: str) -> str:
    text = repr(value)
    return text if len(text) <= MAX_ITEM_CHARS else text[: MAX_ITEM_CHARS - 3] + "..."


def summarize(items: Sequence[str]) -> str:
    """A list for an error message: whole when short, else its size and first few items."""
    if len(items) <= SHOWN_ITEMS:
        return "[" + ", ".join(_item(i) for i in items) + "]"
    shown = ", ".join(_item(i) for i in items[:SHOWN_ITEMS])
    return f"[{shown}, ... {len(items) - SHOWN_ITEMS} more: {len(items)} in all]"


def status_message(text: str) -> str:
    """*text* cut to :data:`MAX_STATUS_CHARS`, saying how much was left out."""
    if len(text) <= MAX_STATUS_CHARS:
        return text
    cut = f" ... ({len(text) - MAX_STATUS_CHARS} more characters in the node agent's log)"
    return text[: MAX_STATUS_CHARS - len(cut)] + cut
