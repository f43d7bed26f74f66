#!/usr/bin/env python3
"""List the environment variables the pinned SGLang and Mooncake client wheels read.

Neither package is imported (that would need torch and GPU libraries): each wheel is opened
as a zip file and read statically.

* Python sources (both wheels) are parsed with the ``ast`` module. A read is

  - a field ``NAME = EnvBool(default, ...)`` (any ``Env*`` descriptor) of the ``Envs``
    registry in ``sglang/srt/environ.py``; its default is the first argument, and the
    ``deprecated_name=`` of an alias field is read too;
  - ``os.environ["NAME"]`` (loaded, not stored), ``"NAME" in os.environ``,
    ``os.environ.get("NAME"[, default])``, ``os.environ.setdefault("NAME", ...)`` (it keeps a
    value that is set), ``os.environ.pop("NAME", ...)``, ``os.getenv("NAME"[, default])``,
    and the same through ``environ`` imported from os;
  - a call of one of SGLang's helpers that take the variable's name first:
    ``get_bool_env_var``, ``get_int_env_var``, ``get_float_env_var``, ``get_str_env_var``,
    ``get_histogram_conf_from_env``, and the local registries' ``_GatedBool``, ``_GatedInt``
    and ``_lazy_path``.

  A read whose name is not a string literal (an f-string, a variable) is counted per file in
  ``computed_reads``: its name is not known statically.
* C, C++ and CUDA sources that SGLang ships for its JIT kernels: every ``getenv("NAME")`` and
  ``std::getenv("NAME")`` with a literal name (a regular expression; these are not Python).
* The Mooncake wheel's native libraries (``.so`` files under ``mooncake/`` and its bundled
  ``.libs``): its C++ reads names with ``getenv`` and hands the literal to it, so each name is
  a NUL-terminated string in the library's read-only data. The script parses the ELF section
  table and lists the strings of ``.rodata`` that are whole names with Mooncake's prefixes
  (``MC_`` or ``MOONCAKE_``), in the libraries whose dynamic symbols import ``getenv`` or
  ``secure_getenv``. A prefixed constant that is never passed to getenv would be listed too:
  that errs towards listing a variable nobody reads, never towards missing one.

Usage: extract_env.py SGLANG_WHEEL MOONCAKE_WHEEL > sglang-env.json
"""

from __future__ import annotations

import ast
import json
import re
import struct
import sys
import zipfile

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HELPERS = {
    "get_bool_env_var",
    "get_int_env_var",
    "get_float_env_var",
    "get_str_env_var",
    "get_histogram_conf_from_env",
    "_GatedBool",
    "_GatedInt",
    "_lazy_path",
}
ENVIRON_METHODS = {"get", "setdefault", "pop"}
NATIVE_PREFIX = re.compile(rb"^(MC|MOONCAKE)_[A-Z0-9_]+$")
C_GETENV = re.compile(r'\bgetenv\s*\(\s*"([A-Za-z_][A-Za-z0-9_]*)"')
C_SOURCES = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp")
ENVS_MODULE = "sglang/srt/environ.py"


class Table:
    def __init__(self):
        self.vars = {}
        self.computed = {}

    def add(self, name, package, path, line, how, default=None, section=None):
        v = self.vars.setdefault(name, {"name": name, "defaults": set(), "reads": set(), "section": None})
        if default is not None:
            v["defaults"].add(default)
        if section and not v["section"]:
            v["section"] = section
        v["reads"].add((package, path, line, how))

    def computed_read(self, package, path):
        key = (package, path)
        self.computed[key] = self.computed.get(key, 0) + 1

    def json(self, versions):
        out = []
        for name in sorted(self.vars):
            v = self.vars[name]
            reads = sorted(v["reads"], key=lambda r: (r[0], r[1], r[2] or 0, r[3]))
            entry = {"name": name}
            if v["section"]:
                entry["section"] = v["section"]
            if v["defaults"]:
                entry["defaults"] = sorted(v["defaults"])
            entry["readers"] = sorted({r[0] for r in reads})
            # One string per read, "FILE[:LINE] HOW" (the package is in readers and the path).
            entry["reads"] = [f"{f}:{ln} {h}" if ln else f"{f} {h}" for _p, f, ln, h in reads]
            out.append(entry)
        computed = [{"package": p, "file": f, "count": n} for (p, f), n in sorted(self.computed.items())]
        return {**versions, "variables": out, "computed_reads": computed}


def default_text(node):
    """A default as the text a variable would hold: literals as Python would print them
    with str(), anything else as its source."""
    if node is None:
        return None
    try:
        val = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return "<" + ast.unparse(node) + ">"
    if val is None:
        return "<None>"
    if isinstance(val, bool):
        return "true" if val else "false"
    if isinstance(val, (tuple, list)) and not val:
        return ""
    return str(val)


def literal_name(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.match(node.value):
        return node.value
    return None


def is_environ(node, environ_names):
    """os.environ, or a bare name bound to it (from os import environ)."""
    if isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os":
        return True
    return isinstance(node, ast.Name) and node.id in environ_names


def is_getenv(func, getenv_names):
    if isinstance(func, ast.Attribute) and func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os":
        return True
    return isinstance(func, ast.Name) and func.id in getenv_names


def call_name(func):
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def scan_python(table, package, path, source):
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise SystemExit(f"{package} {path}: cannot parse: {e}")
    environ_names, getenv_names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            for a in node.names:
                if a.name == "environ":
                    environ_names.add(a.asname or a.name)
                if a.name == "getenv":
                    getenv_names.add(a.asname or a.name)

    def read(name_node, line, how, default_node=None):
        name = literal_name(name_node)
        if name is None:
            table.computed_read(package, path)
            return
        table.add(name, package, path, line, how, default_text(default_node))

    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_environ(node.value, environ_names) and isinstance(node.ctx, ast.Load):
            read(node.slice, node.lineno, "os.environ[]")
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and is_environ(node.comparators[0], environ_names):
            read(node.left, node.lineno, "in os.environ")
        elif isinstance(node, ast.Call):
            f = node.func
            if not node.args:
                continue
            if isinstance(f, ast.Attribute) and f.attr in ENVIRON_METHODS and is_environ(f.value, environ_names):
                dflt = node.args[1] if f.attr == "get" and len(node.args) > 1 else None
                read(node.args[0], node.lineno, "os.environ." + f.attr, dflt)
            elif is_getenv(f, getenv_names):
                read(node.args[0], node.lineno, "os.getenv", node.args[1] if len(node.args) > 1 else None)
            elif call_name(f) in HELPERS:
                dflt = node.args[1] if len(node.args) > 1 else None
                for kw in node.keywords:
                    if kw.arg == "default":
                        dflt = kw.value
                if call_name(f) == "_lazy_path":
                    dflt = None
                read(node.args[0], node.lineno, call_name(f), dflt)

    if path == ENVS_MODULE:
        scan_registry(table, package, path, tree, source)


def scan_registry(table, package, path, tree, source):
    """The fields of class Envs, each with its section (the comment heading it sits under)."""
    lines = source.splitlines()
    envs = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Envs"), None)
    if envs is None:
        raise SystemExit(f"{path}: no class Envs")
    headings = []
    for i in range(envs.lineno, envs.end_lineno):
        rule = re.compile(r"^\s*# =+\s*$")
        if rule.match(lines[i - 1]) and i + 1 < len(lines) and re.match(r"^\s*# \S", lines[i]) and rule.match(lines[i + 1]):
            headings.append((i + 1, lines[i].strip()[2:].strip()))
    fields = 0
    for stmt in envs.body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            continue
        call = stmt.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.startswith("Env")):
            continue
        name = stmt.targets[0].id
        section = None
        for ln, title in headings:
            if ln < stmt.lineno:
                section = title
        dflt = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "default"), None)
        table.add(name, package, path, stmt.lineno, "Envs." + call.func.id, default_text(dflt), section)
        fields += 1
        for kw in call.keywords:
            if kw.arg == "deprecated_name":
                alias = literal_name(kw.value)
                if alias is None:
                    raise SystemExit(f"{path}:{stmt.lineno}: {name} has a deprecated_name that is not a literal")
                table.add(alias, package, path, stmt.lineno, "Envs alias of " + name, None, section)
    if fields < 100:
        raise SystemExit(f"{path}: only {fields} Envs fields found; the registry's form changed")


def elf_getenv_strings(data):
    """The MC_/MOONCAKE_ names among the strings of an ELF's .rodata, when its dynamic
    symbols import getenv or secure_getenv; None when it imports neither."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None  # only 64-bit little-endian ELF files are expected in the wheel
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size, link, _info, _align, _entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize)
        secs.append((name, typ, off, size, link))
    strtab_off = secs[shstrndx][2]

    def sec_name(s):
        end = data.index(b"\0", strtab_off + s[0])
        return data[strtab_off + s[0]:end].decode()

    by_name = {sec_name(s): s for s in secs}
    dynstr = by_name.get(".dynstr")
    if dynstr is None:
        return None
    symbols = set(data[dynstr[2]:dynstr[2] + dynstr[3]].split(b"\0"))
    if b"getenv" not in symbols and b"secure_getenv" not in symbols:
        return None
    names = set()
    for sname in (".rodata",):
        s = by_name.get(sname)
        if s is None:
            continue
        for chunk in data[s[2]:s[2] + s[3]].split(b"\0"):
            if NATIVE_PREFIX.match(chunk):
                names.add(chunk.decode())
    return names


def scan_wheel(table, package, wheel, native):
    z = zipfile.ZipFile(wheel)
    for path in sorted(z.namelist()):
        if path.endswith(".py"):
            scan_python(table, package, path, z.read(path).decode("utf-8"))
        elif package == "sglang" and path.endswith(C_SOURCES):
            text = z.read(path).decode("utf-8", "replace")
            for m in C_GETENV.finditer(text):
                table.add(m.group(1), package, path, text.count("\n", 0, m.start()) + 1, "getenv (C++)")
        elif native and (path.endswith(".so") or ".so." in path):
            names = elf_getenv_strings(z.read(path))
            for n in sorted(names or ()):
                table.add(n, package, path, None, "getenv (native string)")


def version_of(wheel, package):
    z = zipfile.ZipFile(wheel)
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if line.startswith("Version: "):
            return line.split(": ", 1)[1].strip()
    raise SystemExit(f"{wheel}: no version in {meta}")


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: extract_env.py SGLANG_WHEEL MOONCAKE_WHEEL")
    sg, mc = sys.argv[1:]
    table = Table()
    scan_wheel(table, "sglang", sg, native=False)
    scan_wheel(table, "mooncake", mc, native=True)
    out = table.json({"sglang_version": version_of(sg, "sglang"), "mooncake_version": version_of(mc, "mooncake")})
    # One variable a line, so a new release's difference reads variable by variable.
    sys.stdout.write("{\n")
    for k in ("sglang_version", "mooncake_version"):
        sys.stdout.write(f" {json.dumps(k)}: {json.dumps(out[k])},\n")
    for k in ("variables", "computed_reads"):
        sys.stdout.write(f" {json.dumps(k)}: [\n")
        rows = [json.dumps(v, separators=(", ", ": ")) for v in out[k]]
        sys.stdout.write(",\n".join("  " + r for r in rows))
        sys.stdout.write("\n ]" + (",\n" if k == "variables" else "\n"))
    sys.stdout.write("}\n")


if __name__ == "__main__":
    main()
