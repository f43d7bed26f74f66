#!/usr/bin/env python3
"""Dump the command-line definitions of the hub CLI's `hf download` as JSON.

The serving image runs `hf download` in an init container to fetch a hub model source. This
script reads what that command accepts from the pinned huggingface_hub (hack/sglang/requirements.txt,
installed in bin/sglang-venv by hack/sglang-venv.sh) through the CLI's own click objects: the
command the `hf` console script runs, its options, their value counts, flag forms and choices.
Run it with the venv's python. internal/hfcli embeds the output and checks every command line the
operator renders against it.

Usage: extract_hf_args.py > internal/hfcli/hf-download-args.json
"""

from __future__ import annotations

import json
import sys
from importlib import metadata

import click

COMMANDS = ["download"]


def entry_point() -> str:
    """The console script that runs the hub CLI's main."""
    for ep in metadata.distribution("huggingface_hub").entry_points:
        if ep.group == "console_scripts" and ep.value == "huggingface_hub.cli.hf:main":
            return ep.name
    raise SystemExit("huggingface_hub has no console script for huggingface_hub.cli.hf:main")


def type_name(t: click.ParamType) -> str:
    if isinstance(t, click.Choice):
        return "choice"
    if isinstance(t, click.types.IntParamType):
        return "int"
    if isinstance(t, click.types.FloatParamType):
        return "float"
    if isinstance(t, click.types.BoolParamType):
        return "bool"
    if isinstance(t, click.types.StringParamType):
        return "str"
    raise SystemExit(f"unknown click type {t!r}: teach extract_hf_args.py and internal/hfcli about it")


def param(p: click.Parameter) -> dict:
    out = {"name": p.name, "nargs": p.nargs, "required": bool(p.required)}
    if isinstance(p, click.Option):
        out["flags"] = list(p.opts)
        if p.secondary_opts:
            out["negations"] = list(p.secondary_opts)
        out["isFlag"] = bool(p.is_flag)
        out["multiple"] = bool(p.multiple)
    elif not isinstance(p, click.Argument):
        raise SystemExit(f"unknown click parameter {p!r}")
    if not (isinstance(p, click.Option) and p.is_flag):
        out["type"] = type_name(p.type)
        if isinstance(p.type, click.Choice):
            out["choices"] = [str(c) for c in p.type.choices]
    return out


def main() -> None:
    from huggingface_hub.cli import hf

    group = hf.app
    ctx = click.Context(group, info_name=entry_point())
    commands = {}
    for name in COMMANDS:
        cmd = group.get_command(ctx, name)
        if cmd is None:
            raise SystemExit(f"the hub CLI has no {name} command")
        if hasattr(cmd, "materialize"):
            cmd = cmd.materialize()
        sub_ctx = click.Context(cmd, info_name=name, parent=ctx)
        params = [param(p) for p in cmd.get_params(sub_ctx)]
        commands[name] = {
            "arguments": [p for p in params if "flags" not in p],
            "options": [p for p in params if "flags" in p],
        }
    doc = {
        "huggingface_hub": metadata.version("huggingface_hub"),
        "program": ctx.info_name,
        "commands": commands,
    }
    json.dump(doc, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
