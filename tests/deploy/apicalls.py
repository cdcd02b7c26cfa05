"""Which Kubernetes API requests a piece of code makes, found by reading the code.

Why: the chart's RBAC must grant each component exactly what it calls. Listing the calls by
hand would drift the day someone adds one; instead this reads the sources (``ast``) and finds
two kinds of call:

* a method of the official client's generated APIs (``CoreV1Api.patch_node``,
  ``CoordinationV1Api.read_namespaced_lease_without_preload_content``, ...) called on an object
  the code made with ``...Api(...)`` or annotated as one (so ``self.cluster.delete_node`` is not
  taken for ``CoreV1Api.delete_node``), looked up in the installed client, whose generated
  ``_<method>_serialize`` names the HTTP method and path;
* a raw request, ``self._call("PATCH", path, ...)``: an HTTP method literal followed by a path
  built from literals, f-strings, local variables and small helper methods of the same module.

Each request becomes an RBAC triple (apiGroup, resource[/subresource], verb) by the API
server's own rules: GET on a collection is ``list`` (and ``watch`` when the code passes
``watch=True``), GET on a named object ``get``, POST ``create``, PUT ``update``, PATCH
``patch``, DELETE ``delete`` or ``deletecollection``.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_SUFFIXES = ("_without_preload_content", "_with_http_info")
_SERIALIZED = re.compile(r"(method|resource_path)\s*=\s*'([^']+)'")


@dataclass(frozen=True, order=True)
class Permission:
    group: str
    resource: str
    verb: str


@dataclass(frozen=True, order=True)
class Request:
    method: str
    path: str
    watch: bool = False
    where: str = ""


_VERB_PREFIX = re.compile(r"^(list|read|create|patch|replace|delete|connect)_")


@cache
def _client_method(name: str) -> tuple[str, str] | None:
    """(HTTP method, path template) of a generated client method, or None if it is not one."""
    import kubernetes.aio.client as aio_client
    import kubernetes.client as sync_client

    if not _VERB_PREFIX.match(name):
        return None
    base = name
    for suffix in _SUFFIXES:
        base = base.removesuffix(suffix)
    for module in (aio_client, sync_client):
        for cls_name in dir(module):
            if not cls_name.endswith("Api"):
                continue
            serializer = getattr(getattr(module, cls_name), f"_{base}_serialize", None)
            if serializer is None:
                continue
            found = dict(_SERIALIZED.findall(inspect.getsource(serializer)))
            return found["method"], found["resource_path"]
    return None


def _string(node: ast.AST, scope: _Scope) -> str | None:
    """A path expression as a template ('{x}' for any interpolated part), or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append("{x}")
        return "".join(parts)
    if isinstance(node, ast.Name):
        assigned = scope.local(node.id)
        return _string(assigned, scope) if assigned is not None else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    ):
        returned = scope.returns(node.func.attr)
        return _string(returned, scope) if returned is not None else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        # A module-level path helper, _pod_path(namespace, name).
        returned = scope.returns(node.func.id)
        return _string(returned, scope) if returned is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string(node.left, scope), _string(node.right, scope)
        return left + right if left is not None and right is not None else None
    return None


class _Scope:
    """Name resolution inside one function of one module, enough for path expressions."""

    def __init__(self, module: ast.Module, function: ast.AST | None) -> None:
        self.module = module
        self.function = function

    def local(self, name: str) -> ast.AST | None:
        if self.function is None:
            return None
        found = None
        for node in ast.walk(self.function):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                found = node.value
        return found

    def returns(self, method: str) -> ast.AST | None:
        for node in ast.walk(self.module):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == method:
                values = [r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value]
                if len(values) == 1:
                    return values[0]
        return None


def _functions(module: ast.Module) -> dict[ast.AST, ast.AST]:
    """The innermost function around every node."""
    owner: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for child in ast.walk(node):
                owner[child] = node  # inner functions are walked later and win
    return owner


def _is_api_type(node: ast.AST | None) -> bool:
    if node is None:
        return False
    text = node.value if isinstance(node, ast.Constant) else ast.unparse(node)
    return isinstance(text, str) and text.split(".")[-1].strip("'\"").endswith("Api")


def _api_receivers(module: ast.Module) -> set[str]:
    """Expressions (as source text) that hold a generated API object in this module."""
    receivers: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _is_api_type(node.value.func):
                receivers.update(ast.unparse(target) for target in node.targets)
        elif isinstance(node, ast.AnnAssign) and _is_api_type(node.annotation):
            receivers.add(ast.unparse(node.target))
        elif isinstance(node, ast.arg) and _is_api_type(node.annotation):
            receivers.add(node.arg)
    return receivers


def _passes_watch(call: ast.Call) -> bool:
    for keyword in call.keywords:
        if keyword.arg == "watch" and isinstance(keyword.value, ast.Constant):
            return bool(keyword.value.value)
    values = [*call.args, *(k.value for k in call.keywords)]
    for arg in values:  # query=[("watch", "true")]
        if isinstance(arg, ast.List | ast.Tuple):
            text = ast.unparse(arg)
            if "'watch'" in text and ("'true'" in text or "'1'" in text):
                return True
    return False


def requests_in_source(source: str, where: str = "") -> set[Request]:
    """Every API request the module *source* makes."""
    module = ast.parse(source)
    owner = _functions(module)
    watches = any(isinstance(n, ast.Call) and _passes_watch(n) for n in ast.walk(module))
    receivers = _api_receivers(module)
    found: set[Request] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Attribute) and (
            ast.unparse(node.value) in receivers
            or (isinstance(node.value, ast.Call) and _is_api_type(node.value.func))
        ):
            described = _client_method(node.attr)
            if described is not None:
                method, path = described
                line = f"{where}:{node.lineno}"
                found.add(Request(method, path, where=line))
                if method == "GET" and watches and node.attr.startswith("list_"):
                    found.add(Request(method, path, watch=True, where=line))
        if (
            isinstance(node, ast.Call)
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in HTTP_METHODS
        ):
            path = _string(node.args[1], _Scope(module, owner.get(node)))
            if path is not None and path.startswith(("/api/", "/apis/")):
                line = f"{where}:{node.lineno}"
                found.add(Request(str(node.args[0].value), path, _passes_watch(node), line))
    return found


def requests_in(paths: list[Path]) -> set[Request]:
    found: set[Request] = set()
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for file in files:
            if "_proto" in file.parts:
                continue
            found |= requests_in_source(file.read_text(), str(file))
    return found


def permission(request: Request) -> Permission:
    """The RBAC triple that authorises *request* (the API server's request-info rules)."""
    parts = [p for p in request.path.split("?")[0].split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not an API path: {request.path} ({request.where})")
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]  # namespaced: namespaces/{namespace}/<resource>...
    resource, named, subresource = rest[0], len(rest) >= 2, rest[2] if len(rest) >= 3 else ""
    verb = {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if named else "deletecollection",
        "GET": "get" if named else ("watch" if request.watch else "list"),
    }[request.method]
    return Permission(group, f"{resource}/{subresource}" if subresource else resource, verb)


def permissions_needed(paths: list[Path]) -> set[Permission]:
    return {permission(r) for r in requests_in(paths)}
