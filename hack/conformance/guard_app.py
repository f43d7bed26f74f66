#!/usr/bin/env python3
"""A Starlette app that routes like the pinned SGLang's HTTP server (test/conformance).

It registers every path of sglang/srt/entrypoints/http_server.py's route decorators, read from
the installed wheel with ast, on Starlette's own router (SGLang's app is FastAPI on Starlette),
and serves it with uvicorn on 127.0.0.1. Every route answers with the keys given in the
environment (GUARD_APP_KEYS, comma separated), the way the real /server_info reports them: at
the top level as api_key and admin_api_key, in internal_states and in launch_command. So any
request that reaches any route gets the keys, and whatever proxy stands in front must take
them out.

It prints one JSON line, {"port": N, "routes": [...]}, once it listens.
"""

import ast
import importlib.util
import json
import os
import socket
import sys
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

root = Path(importlib.util.find_spec("sglang").origin).parent
source = root / "srt" / "entrypoints" / "http_server.py"
VERBS = {"get", "post", "put", "delete", "api_route", "patch"}


def routes(tree: ast.AST) -> list[str]:
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for d in node.decorator_list:
            if (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr in VERBS
                    and d.args and isinstance(d.args[0], ast.Constant) and isinstance(d.args[0].value, str)):
                out.add(d.args[0].value)
    return sorted(out)


paths = routes(ast.parse(source.read_text()))
keys = [k for k in os.environ.get("GUARD_APP_KEYS", "").split(",") if k]
admin, api = (keys + ["", ""])[:2]


async def info(request):
    args = {"api_key": api, "admin_api_key": admin, "model_path": "m", "route": request.url.path}
    return JSONResponse({**args, "internal_states": [dict(args)],
                         "launch_command": f"python3 -m sglang.launch_server --api-key {api} --admin-api-key {admin}"})


app = Starlette(routes=[Route(p, info, methods=["GET", "POST", "PUT", "DELETE"]) for p in paths])

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
print(json.dumps({"port": sock.getsockname()[1], "routes": paths}), flush=True)
config = uvicorn.Config(app, log_level="warning", access_log=False)
uvicorn.Server(config).run(sockets=[sock])
sys.exit(0)
