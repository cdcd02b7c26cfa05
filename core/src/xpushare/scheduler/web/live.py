"""Live usage of a node's devices from the node agents' metrics, through Prometheus.

Why Prometheus and not the node agents: the scheduler does not talk to nodes, and the
agents' metrics (``xpushare_device_*``, ``xpushare_container_*``; docs/node-agent.md) are
scraped already wherever usage is watched. One instant query per metric, bounded in time
and in the size of the answer; a Prometheus that is down or answers nonsense leaves the
node page without live figures and with the reason, never without the page.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

#: Largest Prometheus answer read (a node's 8 devices and their containers are a few KB).
MAX_ANSWER_BYTES = 1024 * 1024

#: The node agent's gauges shown, by the name the page uses.
DEVICE_METRICS = {
    "utilization": "xpushare_device_utilization_ratio",
    "memory_used_bytes": "xpushare_device_memory_used_bytes",
    "temperature_celsius": "xpushare_device_temperature_celsius",
    "power_watts": "xpushare_device_power_watts",
}
CONTAINER_METRICS = {
    "memory_used_bytes": "xpushare_container_memory_used_bytes",
    "utilization": "xpushare_container_utilization_ratio",
}


class LiveUnavailable(Exception):
    """Prometheus could not be asked or gave no usable answer; the message says why."""


def label_value(text: str) -> str:
    """*text* as a PromQL string literal (backslash and quote escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class LiveUsage:
    """Instant queries against one Prometheus."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _ask(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """Prometheus' ``data`` for one API call, its size and its time bounded."""
        if self._session is None:
            self._session = aiohttp.ClientSession(trust_env=False)
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                self._session.get(f"{self.url}{path}", params=params) as resp,
            ):
                body = await resp.content.read(MAX_ANSWER_BYTES + 1)
                if len(body) > MAX_ANSWER_BYTES:
                    raise LiveUnavailable(f"Prometheus answered more than {MAX_ANSWER_BYTES} bytes")
                if resp.status != 200:
                    raise LiveUnavailable(f"Prometheus answered HTTP {resp.status}")
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise LiveUnavailable(f"Prometheus at {self.url} not reachable: {exc!r}") from None
        try:
            doc = json.loads(body)
            data = doc["data"]
            if not isinstance(data, dict) or not isinstance(data["result"], list):
                raise TypeError("result is not a list")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise LiveUnavailable(f"Prometheus answer not understood: {exc}") from None
        return data

    async def _query(self, query: str) -> list[dict[str, Any]]:
        data = await self._ask("/api/v1/query", {"query": query})
        return [r for r in data["result"] if isinstance(r, dict)]

    async def query_range(
        self, query: str, start: float, end: float, step_s: int
    ) -> list[dict[str, Any]]:
        """The series of a range query (``resultType`` ``matrix``), unchecked inside."""
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step_s)}
        data = await self._ask("/api/v1/query_range", params)
        if data.get("resultType") != "matrix":
            kind = str(data.get("resultType"))[:40]
            raise LiveUnavailable(f"Prometheus answer not understood: resultType {kind!r}")
        return [r for r in data["result"] if isinstance(r, dict)]

    @staticmethod
    def _value(sample: dict[str, Any]) -> float | None:
        value = sample.get("value")
        if not isinstance(value, list) or len(value) != 2:
            return None
        try:
            return float(value[1])
        except (TypeError, ValueError):
            return None

    async def node(self, node: str) -> dict[str, Any]:
        """Per device (by id) and per container: the latest value of each gauge."""
        selector = "{node=" + label_value(node) + "}"
        devices: dict[str, dict[str, float]] = {}
        containers: dict[str, dict[str, Any]] = {}
        for field, metric in DEVICE_METRICS.items():
            for sample in await self._query(metric + selector):
                labels = sample.get("metric") or {}
                value = self._value(sample)
                device = str(labels.get("device") or "")
                if value is not None and device:
                    devices.setdefault(device[:200], {})[field] = value
        for field, metric in CONTAINER_METRICS.items():
            for sample in await self._query(metric + selector):
                labels = sample.get("metric") or {}
                value = self._value(sample)
                if value is None:
                    continue
                parts = [str(labels.get(k) or "")[:253] for k in ("namespace", "pod", "container")]
                device = str(labels.get("device") or "")[:200]
                key = "/".join(parts) + "@" + device
                entry = containers.setdefault(
                    key,
                    {
                        "namespace": parts[0],
                        "pod": parts[1],
                        "container": parts[2],
                        "device": device,
                    },
                )
                entry[field] = value
        return {"devices": devices, "containers": list(containers.values())}
