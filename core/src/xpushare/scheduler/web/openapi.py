"""The OpenAPI 3.1 description of the web view's JSON API (served at /api/v1/openapi.json).

Written by hand, next to the routes it describes: the tests hold the two in step (every
route is described, every described path is served).
"""

from __future__ import annotations

from typing import Any

from xpushare.scheduler.web.fleet import DEVICE_COLUMNS, SUM_FIELDS
from xpushare.scheduler.web.history import DEFAULT_MINUTES, MAX_MINUTES, MIN_MINUTES

_ERROR = {
    "description": "the request is not well formed, or the caller may not look",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"error": {"type": "string"}},
                "required": ["error"],
            }
        }
    },
}

_AUTH = {
    "401": {**_ERROR, "description": "no bearer token, or one the API server does not accept"},
    "403": {**_ERROR, "description": "the token's user may not get /xpushare/web"},
    "503": {**_ERROR, "description": "the API server could not review the token"},
}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_FIT = {
    "type": "object",
    "description": "the explanation `xpushare fit --json` prints for one node",
    "properties": {
        "pod": {"type": "string"},
        "node": {"type": "string"},
        "policy": {"type": "string"},
        "fits": {"type": "boolean"},
        "reason": {"type": "string"},
        "score": {"type": "number"},
        "containers": {"type": "array", "items": {"type": "object"}},
    },
}

_EXPLANATION = {
    "type": "object",
    "properties": {
        "pod": {"type": "string"},
        "asks": {"type": "string", "description": "the request, as events describe it"},
        "policy": {"type": "string"},
        "nodes_considered": {"type": "integer"},
        "headline": {
            "type": "string",
            "description": "one line: nodes that fit, and each reason the others do not once,"
            " with its count",
        },
        "summary": {"type": "string", "description": "as the NoDeviceFit event says it"},
        "filter": {
            "type": "object",
            "description": "exactly what /filter answers for this pod over every node",
        },
        "groups": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "message": {"type": "string"},
                    "count": {"type": "integer"},
                    "reason": {"type": ["string", "null"]},
                    "unresolvable": {"type": "boolean"},
                    "nodes": {"type": "array", "items": {"type": "string"}},
                    "explanations": {"type": "array", "items": _FIT},
                },
            },
        },
        "ranking": {"type": "array", "items": {"type": "object"}},
        "best": {"oneOf": [_FIT, {"type": "null"}]},
    },
}


def document() -> dict[str, Any]:
    node_param = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "xpushare web view",
            "version": "1",
            "description": "Read-only view of the fleet, from the scheduler's memory "
            "(docs/web-view.md). With web.auth.mode=token every call needs a bearer token.",
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
        "paths": {
            "/api/v1/fleet": {
                "get": {
                    "summary": "Every node and device: allocation, free capacity, fragmentation",
                    "parameters": [
                        {"name": "vendor", "in": "query", "schema": {"type": "string"}},
                        {"name": "model", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "node",
                            "in": "query",
                            "description": "part of the node's name",
                            "schema": {"type": "string"},
                        },
                        {
                            "name": "label",
                            "in": "query",
                            "description": "KEY or KEY=VALUE; repeat to require several",
                            "schema": {"type": "array", "items": {"type": "string"}},
                            "explode": True,
                        },
                    ],
                    "responses": {
                        "200": _json(
                            "The fleet. ETag/If-None-Match answer 304 while nothing changed.",
                            {
                                "type": "object",
                                "properties": {
                                    "policy": {"type": "string"},
                                    "fragmentation_measured": {"type": "boolean"},
                                    "device_columns": {
                                        "type": "array",
                                        "items": {"enum": list(DEVICE_COLUMNS)},
                                    },
                                    "total_nodes": {"type": "integer"},
                                    "shown_nodes": {"type": "integer"},
                                    "summary": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "properties": {
                                                "vendor": {"type": "string"},
                                                "model": {"type": "string"},
                                                "nodes": {"type": "integer"},
                                                **{f: {"type": "integer"} for f in SUM_FIELDS},
                                                "free_gpus": {"type": "number"},
                                                "fragmentation_gpus": {"type": "number"},
                                            },
                                        },
                                    },
                                    "nodes": {
                                        "type": "array",
                                        "description": "name and groups: [vendor, model, "
                                        "fragmentation in GPUs, rows of device_columns]",
                                        "items": {"type": "object"},
                                    },
                                },
                            },
                        ),
                        "304": {"description": "unchanged since the ETag given"},
                        "400": _ERROR,
                        **_AUTH,
                    },
                }
            },
            "/api/v1/history": {
                "get": {
                    "summary": "Fleet-wide device memory allocated and used over time (Prometheus)",
                    "parameters": [
                        {
                            "name": "minutes",
                            "in": "query",
                            "required": False,
                            "schema": {
                                "type": "integer",
                                "minimum": MIN_MINUTES,
                                "maximum": MAX_MINUTES,
                                "default": DEFAULT_MINUTES,
                            },
                        }
                    ],
                    "responses": {
                        "200": _json(
                            "Both series, at most 240 points each; configured false (and a"
                            " message naming web.prometheus_url) when no Prometheus is set",
                            {
                                "type": "object",
                                "properties": {
                                    "configured": {"type": "boolean"},
                                    "minutes": {"type": "integer"},
                                    "step_s": {"type": "integer"},
                                    "start": {"type": "number"},
                                    "end": {"type": "number"},
                                    "series": {
                                        "type": "object",
                                        "description": "allocated_mib and used_mib:"
                                        " [unix seconds, MiB] pairs in time order",
                                    },
                                    "message": {"type": "string"},
                                },
                            },
                        ),
                        "400": _ERROR,
                        **_AUTH,
                        "503": {
                            **_ERROR,
                            "description": "Prometheus down or its answer not understood, or"
                            " the API server could not review the token",
                        },
                    },
                }
            },
            "/api/v1/nodes/{name}": {
                "get": {
                    "summary": "One node: devices, their shares, health, live usage",
                    "parameters": [node_param],
                    "responses": {
                        "200": _json("The node", {"type": "object"}),
                        "404": {**_ERROR, "description": "no such node in the ledger"},
                        **_AUTH,
                    },
                }
            },
            "/api/v1/namespaces/{namespace}/pods": {
                "get": {
                    "summary": "A namespace's pods with devices: node, devices held, totals",
                    "parameters": [
                        {
                            "name": "namespace",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                    "responses": {
                        "200": _json(
                            "The namespace's task list (at most 500 pods; pods_total counts all)",
                            {"type": "object"},
                        ),
                        "400": _ERROR,
                        **_AUTH,
                    },
                }
            },
            "/api/v1/pods/{namespace}/{name}": {
                "get": {
                    "summary": "One pod: its devices, or why it is Pending; its events",
                    "parameters": [
                        {
                            "name": "namespace",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        node_param,
                    ],
                    "responses": {
                        "200": _json(
                            "The pod",
                            {
                                "type": "object",
                                "properties": {
                                    "state": {
                                        "enum": ["binding", "bound", "running", "pending", "other"]
                                    },
                                    "assignment": {"type": ["object", "null"]},
                                    "explanation": {"oneOf": [_EXPLANATION, {"type": "null"}]},
                                    "events": {
                                        "type": "array",
                                        "description": "oldest first; the same event (type,"
                                        " reason, message, source) once, its counts summed",
                                        "items": {"type": "object"},
                                    },
                                },
                            },
                        ),
                        "404": {**_ERROR, "description": "no such pod"},
                        **_AUTH,
                    },
                }
            },
            "/api/v1/search": {
                "get": {
                    "summary": "Nodes and pods whose name contains the text",
                    "parameters": [
                        {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}}
                    ],
                    "responses": {
                        "200": _json("Matches", {"type": "object"}),
                        "400": _ERROR,
                        **_AUTH,
                    },
                }
            },
            "/api/v1/whatif": {
                "post": {
                    "summary": "Where a pod would go and why, without creating anything",
                    "requestBody": {
                        "required": True,
                        "description": "a Pod manifest, JSON or YAML (no anchors or aliases)",
                        "content": {
                            "application/json": {"schema": {"type": "object"}},
                            "application/yaml": {"schema": {"type": "string"}},
                        },
                    },
                    "responses": {
                        "200": _json("The explanation", _EXPLANATION),
                        "400": _ERROR,
                        "413": _ERROR,
                        **_AUTH,
                    },
                }
            },
            "/api/v1/openapi.json": {
                "get": {
                    "summary": "This document",
                    "security": [{}],
                    "responses": {"200": _json("OpenAPI 3.1", {"type": "object"})},
                }
            },
        },
    }
