#!/usr/bin/env python3
"""Extract the command-line arguments of ``python -m smg.launch_router`` from its wheel.

The launcher's arguments are argparse definitions (``smg.router_args.RouterArgs.add_cli_args``)
whose choices are partly computed by the wheel's Rust extension, so this script runs them: it
unpacks the wheel into a temporary directory, imports ``smg.router_args`` from there (it needs
only the standard library and the extension, which links nothing but libc), builds the parser
the way ``smg.launch_router.parse_router_args`` does, and writes every argument in the format of
internal/sglang/argspec (the format hack/sglang/extract_args.py writes for the server).

Usage: extract_args.py WHEEL > router-args.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zipfile

ACTIONS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "BooleanOptionalAction": "boolean_optional",
    "_AppendAction": "append",
    "_ExtendAction": "extend",
}


def type_name(t):
    if t is None:
        return None
    if t in (str, int, float):
        return t.__name__
    # A converter of the launcher's own (a lambda, str.lower, _parse_int_csv): its values are
    # strings the Rust side checks; the argspec lets any string through.
    name = getattr(t, "__name__", "custom")
    return "custom:" + ("lambda" if name == "<lambda>" else name)


def literal(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)) and all(literal(x) == x for x in v):
        return list(v)
    return None


def record(action):
    kind = type(action).__name__
    if kind == "_HelpAction":
        return None
    if kind not in ACTIONS:
        raise SystemExit(f"{action.option_strings}: action {kind} is not understood; teach the extractor")
    if not action.option_strings:
        raise SystemExit(f"{action.dest}: positional arguments are not understood")
    nargs = action.nargs
    if kind in ("_StoreTrueAction", "_StoreFalseAction", "BooleanOptionalAction"):
        nargs = 0
    choices = action.choices
    if choices is not None:
        choices = [c for c in choices]
    return {
        "action": ACTIONS[kind],
        "choices": choices,
        "default": literal(action.default),
        "deprecated": None,
        "dest": action.dest,
        "flags": sorted(action.option_strings, key=lambda f: (not f.startswith("--"), action.option_strings.index(f))),
        "nargs": nargs,
        "required": bool(action.required),
        "type": type_name(action.type),
    }


def main(argv):
    if len(argv) != 2:
        raise SystemExit(__doc__)
    wheel = argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)
            version = next(
                line.split(":", 1)[1].strip()
                for line in z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode().splitlines()
                if line.startswith("Version:")
            )
        sys.path.insert(0, tmp)
        from smg.router_args import RouterArgs  # noqa: E402 (imported from the unpacked wheel)

        parser = argparse.ArgumentParser()
        RouterArgs.add_cli_args(parser, use_router_prefix=False)
        arguments = [r for r in (record(a) for a in parser._actions) if r is not None]
    arguments.sort(key=lambda r: r["flags"][0])
    json.dump(
        {"program": "smg", "version": version, "source": wheel.rsplit("/", 1)[-1], "arguments": arguments},
        sys.stdout,
        indent=1,
        sort_keys=True,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv)
