#!/usr/bin/env python3
"""What the pinned SGLang does with the paths the operator's probes ask (test/conformance).

Prints JSON for the paths given as arguments:
  auth        whether SGLang's own auth decision lets a request without a key through when both
              --api-key and --admin-api-key are set (sglang.srt.utils.auth.decide_request_auth);
  follower    whether the stand-in server a follower (node rank >= 1) starts serves the path, read
              from the source of sglang.srt.utils.common.launch_dummy_health_check_server (its
              FastAPI routes; the conformance venv has no FastAPI to run it);
  leader      whether the leader's server (sglang.srt.entrypoints.http_server) routes the path;
  generationOnHealth   SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION as SGLang reads it from the
              environment the operator gives the container.
"""

import ast
import importlib.util
import json
import os
import sys
from pathlib import Path

os.environ["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] = "false"

from sglang.srt.environ import envs  # noqa: E402
from sglang.srt.utils.auth import AuthLevel, decide_request_auth  # noqa: E402

root = Path(importlib.util.find_spec("sglang").origin).parent


def routes(tree: ast.AST) -> set[str]:
    """The paths of @app.get("...") decorators under tree."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                if (isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "get"
                        and d.args and isinstance(d.args[0], ast.Constant)):
                    out.add(d.args[0].value)
    return out


common = ast.parse((root / "srt" / "utils" / "common.py").read_text())
dummy = [n for n in ast.walk(common) if isinstance(n, ast.FunctionDef) and n.name == "launch_dummy_health_check_server"]
if len(dummy) != 1:
    raise SystemExit("sglang.srt.utils.common has no launch_dummy_health_check_server")
follower = routes(dummy[0])
leader = routes(ast.parse((root / "srt" / "entrypoints" / "http_server.py").read_text()))

paths = sys.argv[1:]
print(json.dumps({
    "auth": {p: decide_request_auth(method="GET", path=p, authorization_header=None, api_key="k",
                                    admin_api_key="a", auth_level=AuthLevel.NORMAL).allowed for p in paths},
    "follower": {p: p in follower for p in paths},
    "leader": {p: p in leader for p in paths},
    "generationOnHealth": envs.SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION.get(),
}))
