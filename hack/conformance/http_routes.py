#!/usr/bin/env python3
"""An HTTP server that routes as SGLang 0.5.23's does, for the proxy's conformance test.

It reads the routes from the installed sglang package's own source (entrypoints/http_server.py
and the routers it includes, v1_loads.py and elastic_ep.py) with Python's ast module, without
importing it (the venv holds no FastAPI: FastAPI's routes match with Starlette's compile_path,
which this server uses directly), registers each path and its methods in a Starlette 1.10 app,
and serves it with uvicorn on 127.0.0.1:PORT. /server_info and /get_server_info answer the keys
as the release does (api_key, admin_api_key, ssl_keyfile_password at the top and in
internal_states, and launch_command joined by spaces); every other route answers its own path.

Usage: http_routes.py PORT API_KEY ADMIN_KEY. It prints "routes N" once listening.
"""

import ast
import importlib.util
import os
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute

VERBS = {"get": ["GET"], "post": ["POST"], "put": ["PUT"], "delete": ["DELETE"], "head": ["HEAD"], "patch": ["PATCH"]}


def path_of(node):
    """The route path of a decorator's first argument: a literal, or os.environ.get's default."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Call) and len(node.args) == 2 and isinstance(node.args[1], ast.Constant):
        return node.args[1].value
    return None


def routes_of(source):
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for d in node.decorator_list:
            if not (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and isinstance(d.func.value, ast.Name)):
                continue
            if d.func.value.id not in ("app", "router") or not d.args:
                continue
            path = path_of(d.args[0])
            if path is None:
                continue
            verb = d.func.attr
            if verb == "websocket":
                out.append((path, None))
            elif verb == "api_route":
                methods = ["GET"]
                for kw in d.keywords:
                    if kw.arg == "methods":
                        methods = [e.value for e in kw.value.elts]
                out.append((path, methods))
            elif verb in VERBS:
                out.append((path, VERBS[verb]))
    return out


def main():
    port, api_key, admin_key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    root = os.path.dirname(importlib.util.find_spec("sglang").origin)
    found = []
    for f in ("srt/entrypoints/http_server.py", "srt/entrypoints/v1_loads.py", "srt/entrypoints/elastic_ep.py"):
        with open(os.path.join(root, f)) as fh:
            found += routes_of(fh.read())
    args = {"model_path": "Qwen/Qwen3-8B", "api_key": api_key, "admin_api_key": admin_key,
            "ssl_keyfile_password": "tls-password-in-clear", "tp_size": 1}
    launch = f"python -m sglang.launch_server --model-path Qwen/Qwen3-8B --api-key {api_key} --admin-api-key {admin_key}"

    async def info(request):
        if request.headers.get("authorization") != "Bearer " + api_key:
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return JSONResponse({**args, "launch_command": launch, "internal_states": [dict(args)], "version": "0.5.23"})

    def echo(path):
        async def handler(request):
            return JSONResponse({"route": path})
        return handler

    async def ws(websocket):
        await websocket.accept()
        await websocket.send_text(admin_key)
        await websocket.close()

    merged = {}
    for path, methods in found:
        if methods is None:
            merged[path] = None
        elif merged.get(path, []) is not None:
            merged[path] = sorted(set(merged.get(path, [])) | set(methods))
    routes = []
    for path, methods in merged.items():
        if methods is None:
            routes.append(WebSocketRoute(path, ws))
        elif path in ("/server_info", "/get_server_info"):
            routes.append(Route(path, info, methods=methods))
        else:
            routes.append(Route(path, echo(path), methods=methods))
    print("routes", len(routes), flush=True)
    for path, methods in merged.items():
        print("route", path, ",".join(methods or ["WEBSOCKET"]), flush=True)
    uvicorn.run(Starlette(routes=routes), host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
