"""The fake API server defaults a created pod's resources as kube-apiserver 1.36 does (seen in
tests/realcluster): requests from limits, whole numbers in canonical form."""

from __future__ import annotations

import aiohttp
import pytest

from xpushare.testing.apiserver import FakeApiServer, canonical_integer, pod


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("8000", "8k"),
        ("1", "1"),
        ("1500", "1500"),
        ("16000000", "16M"),
        ("0", "0"),
        ("16Gi", "16Gi"),
        ("0.5", "0.5"),
    ],
)
def test_whole_numbers_take_the_canonical_form(given: str, stored: str) -> None:
    assert canonical_integer(given) == stored


async def test_a_pod_created_over_http_is_stored_as_the_real_server_stores_it() -> None:
    async with FakeApiServer() as api, aiohttp.ClientSession() as http:
        body = pod("hami", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"})
        url = f"{api.url}/api/v1/namespaces/default/pods"
        async with http.post(url, json=body) as answer:
            assert answer.status == 201
            created = await answer.json()
    resources = created["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8k"}
    assert resources["requests"] == resources["limits"]
    stored = api.get("pods", "hami", "default")
    assert stored is not None
    assert stored["spec"]["containers"][0]["resources"] == resources
