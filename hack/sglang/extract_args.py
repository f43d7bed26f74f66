#!/usr/bin/env python3
"""Extract the command-line arguments of ``sglang.launch_server`` from a wheel.

Importing sglang pulls in torch, so this script never imports it: it opens the
wheel as a zip file, parses the Python sources with the ``ast`` module and
replays what argparse registration would do.

Two registration styles are understood:

* explicit ``parser.add_argument(...)`` calls inside ``ServerArgs.add_cli_args``
  (and inside module-level helpers it calls with the parser);
* ``add_cli_args_from_dataclass(parser, ServerArgs)``, where every annotated
  field ``name: A[T, "help"]`` or ``name: A[T, Arg(...)]`` of ServerArgs (or of
  the namespace classes ServerArgs is assembled from) becomes one argument.
  The rules below mirror ``sglang/srt/arg_groups/arg_utils.py``.

Choices are resolved statically: literals, module-level constants (following
``from x import y``), ``Literal[...]`` annotations, list concatenation,
``list()/set()/sorted()``, enum members and zero-argument helper functions
whose last ``return`` can itself be resolved. Choices that cannot be resolved
are written as the string ``"any"``.

Anything structural the script does not understand (a call receiving the
parser that it cannot follow, a field annotation it cannot read, two
arguments claiming one option string) stops it with an error, so a new
release cannot silently lose arguments.

Usage: extract_args.py WHEEL > sglang-args.json
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile

SERVER_ARGS_MODULE = "sglang.srt.server_args"
SPEC_INFO_MODULE = "sglang.srt.speculative.spec_info"
SPEC_REGISTRY_MODULE = "sglang.srt.speculative.spec_registry"


class Unresolved(Exception):
    """A value that cannot be computed without running the code."""


class ExtractError(Exception):
    """A structure the extractor does not understand."""


# ---------------------------------------------------------------------------
# Values produced by the evaluator
# ---------------------------------------------------------------------------


class Sym:
    """A reference to something that is not plain data (a function, a class
    outside the wheel, a module attribute), named by its qualified name."""

    def __init__(self, qualname):
        self.qualname = qualname

    @property
    def name(self):
        return self.qualname.rsplit(".", 1)[-1]

    def __repr__(self):
        return "Sym(%s)" % self.qualname


class FuncRef(Sym):
    def __init__(self, scope, node):
        super().__init__(scope.name + "." + node.name)
        self.scope = scope
        self.node = node


class ClassRef(Sym):
    def __init__(self, scope, node):
        super().__init__(scope.name + "." + node.name)
        self.scope = scope
        self.node = node


class EnumMember:
    def __init__(self, name, value):
        self.name = name
        self.value = value


BUILTIN_NAMES = {
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "set",
    "tuple",
    "frozenset",
    "sorted",
    "object",
    "bytes",
}

ENUM_BASES = {"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag"}


# ---------------------------------------------------------------------------
# Source access
# ---------------------------------------------------------------------------


class Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        self._scopes = {}

    def version(self):
        for name in sorted(self.names):
            if name.endswith(".dist-info/METADATA"):
                text = self.zip.read(name).decode("utf-8")
                for line in text.splitlines():
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
        raise ExtractError("the wheel has no METADATA with a Version line")

    def source_path(self, module):
        base = module.replace(".", "/")
        for candidate in (base + ".py", base + "/__init__.py"):
            if candidate in self.names:
                return candidate
        return None

    def scope(self, module):
        if module not in self._scopes:
            path = self.source_path(module)
            if path is None:
                return None
            tree = ast.parse(self.zip.read(path).decode("utf-8"), filename=path)
            self._scopes[module] = ModuleScope(self, module, tree)
        return self._scopes[module]


class ModuleScope:
    """Module-level names of one source file."""

    def __init__(self, wheel, name, tree):
        self.wheel = wheel
        self.name = name
        self.tree = tree
        self.assigns = {}
        self.imports = {}
        self.functions = {}
        self.classes = {}
        self.module_aliases = {}
        for stmt in tree.body:
            self._collect(stmt)

    def _collect(self, stmt):
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    self.assigns[target.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.value is not None:
                self.assigns[stmt.target.id] = stmt.value
        elif isinstance(stmt, ast.ImportFrom):
            module = resolve_relative(self.name, stmt.module, stmt.level)
            for alias in stmt.names:
                self.imports[alias.asname or alias.name] = (module, alias.name)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    self.module_aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    self.module_aliases[top] = top
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.functions[stmt.name] = stmt
        elif isinstance(stmt, ast.ClassDef):
            self.classes[stmt.name] = stmt
        elif isinstance(stmt, ast.If):
            # `if TYPE_CHECKING:` imports and the like: read both arms, the
            # first definition of a name wins over a later fallback.
            for inner in stmt.body + stmt.orelse:
                self._collect(inner)
        elif isinstance(stmt, ast.Try):
            for inner in stmt.body:
                self._collect(inner)


def resolve_relative(current, module, level):
    if not level:
        return module
    parts = current.split(".")
    base = parts[: len(parts) - level]
    if module:
        base.append(module)
    return ".".join(base)


# ---------------------------------------------------------------------------
# A small static evaluator
# ---------------------------------------------------------------------------


class Evaluator:
    def __init__(self, wheel):
        self.wheel = wheel
        self._depth = 0

    def lookup(self, scope, name, local=None):
        if local is not None and name in local:
            value = local[name]
            if isinstance(value, tuple) and value and value[0] == "__import__":
                return self.import_value(value[1], value[2])
            if isinstance(value, ast.AST):
                return self.eval(value, scope, local)
            return value
        if name in scope.assigns:
            return self.eval(scope.assigns[name], scope)
        if name in scope.functions:
            return FuncRef(scope, scope.functions[name])
        if name in scope.classes:
            return ClassRef(scope, scope.classes[name])
        if name in scope.imports:
            module, attr = scope.imports[name]
            return self.import_value(module, attr)
        if name in scope.module_aliases:
            return Sym(scope.module_aliases[name])
        if name in BUILTIN_NAMES:
            return Sym(name)
        raise Unresolved("name %r is not defined in %s" % (name, scope.name))

    def import_value(self, module, attr):
        target = self.wheel.scope(module)
        if target is None:
            # A submodule imported by name, or something outside the wheel.
            sub = self.wheel.scope(module + "." + attr)
            if sub is not None:
                return Sym(module + "." + attr)
            return Sym(module + "." + attr)
        try:
            return self.lookup(target, attr)
        except Unresolved:
            if self.wheel.scope(module + "." + attr) is not None:
                return Sym(module + "." + attr)
            raise

    def eval(self, node, scope, local=None):
        self._depth += 1
        try:
            if self._depth > 60:
                raise Unresolved("evaluation is too deep")
            return self._eval(node, scope, local)
        finally:
            self._depth -= 1

    def _eval(self, node, scope, local):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.List):
            return [self.eval(e, scope, local) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(self.eval(e, scope, local) for e in node.elts)
        if isinstance(node, ast.Set):
            return set(self.eval(e, scope, local) for e in node.elts)
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise Unresolved("dict unpacking")
            return {
                self.eval(k, scope, local): self.eval(v, scope, local)
                for k, v in zip(node.keys, node.values)
            }
        if isinstance(node, ast.Name):
            return self.lookup(scope, node.id, local)
        if isinstance(node, ast.Attribute):
            return self.attribute(node, scope, local)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.eval(node.left, scope, local)
            right = self.eval(node.right, scope, local)
            if isinstance(left, (list, tuple, str)) and type(left) is type(right):
                return left + right
            if isinstance(left, (int, float)) and isinstance(right, (int, float)):
                return left + right
            raise Unresolved("unsupported addition")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            left = self.eval(node.left, scope, local)
            right = self.eval(node.right, scope, local)
            if isinstance(left, (set, frozenset)) and isinstance(right, (set, frozenset)):
                return set(left) | set(right)
            raise Unresolved("unsupported union")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.eval(node.operand, scope, local)
            if isinstance(value, (int, float)):
                return -value
            raise Unresolved("unsupported negation")
        if isinstance(node, ast.Call):
            return self.call(node, scope, local)
        if isinstance(node, (ast.ListComp, ast.SetComp)):
            return self.comprehension(node, scope, local)
        if isinstance(node, ast.JoinedStr):
            raise Unresolved("f-string")
        raise Unresolved("unsupported expression %s" % type(node).__name__)

    def attribute(self, node, scope, local):
        base = self.eval(node.value, scope, local)
        if isinstance(base, EnumMember):
            if node.attr == "name":
                return base.name
            if node.attr == "value":
                return base.value
        if isinstance(base, ClassRef) and self.is_enum(base):
            for member in self.enum_members(base):
                if member.name == node.attr:
                    return member
        if isinstance(base, Sym) and not isinstance(base, (FuncRef, ClassRef)):
            return Sym(base.qualname + "." + node.attr)
        if isinstance(base, ClassRef):
            # Class attributes may name earlier attributes of the same class.
            class_locals = {}
            for stmt in base.node.body:
                if isinstance(stmt, ast.Assign):
                    for target in stmt.targets:
                        if isinstance(target, ast.Name):
                            class_locals[target.id] = stmt.value
            if node.attr in class_locals:
                return self.eval(class_locals[node.attr], base.scope, class_locals)
            for stmt in base.node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name == node.attr:
                    if isinstance(stmt, ast.ClassDef):
                        return ClassRef(base.scope, stmt)
                    return FuncRef(base.scope, stmt)
        raise Unresolved("attribute %r" % node.attr)

    def call(self, node, scope, local):
        if isinstance(node.func, ast.Attribute):
            # String methods on resolved strings: "X".lower(), .upper(), .strip().
            if node.func.attr in ("lower", "upper", "strip") and not node.args:
                try:
                    base = self.eval(node.func.value, scope, local)
                except Unresolved:
                    base = None
                if isinstance(base, str):
                    return getattr(base, node.func.attr)()
        func = self.eval(node.func, scope, local)
        if isinstance(func, Sym) and not isinstance(func, (FuncRef, ClassRef)):
            if func.qualname in ("list", "set", "tuple", "frozenset", "sorted"):
                if len(node.args) != 1 or node.keywords:
                    raise Unresolved("%s() with unusual arguments" % func.qualname)
                items = self.iterate(self.eval(node.args[0], scope, local))
                if func.qualname == "list":
                    return list(items)
                if func.qualname == "tuple":
                    return tuple(items)
                if func.qualname == "sorted":
                    return sorted(items, key=sort_key)
                return set(items)
            raise Unresolved("call of %s" % func.qualname)
        if isinstance(func, FuncRef) and not node.args and not node.keywords:
            return self.call_function(func)
        raise Unresolved("call")

    def call_function(self, func):
        """Evaluate a zero-argument helper through its last top-level return,
        honouring the imports made inside the function."""
        local = {}
        last_return = None
        for stmt in func.node.body:
            if isinstance(stmt, ast.ImportFrom):
                module = resolve_relative(func.scope.name, stmt.module, stmt.level)
                for alias in stmt.names:
                    local[alias.asname or alias.name] = ("__import__", module, alias.name)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        local[target.id] = stmt.value
            elif isinstance(stmt, ast.Return) and stmt.value is not None:
                last_return = stmt.value
        if last_return is None:
            raise Unresolved("function %s has no return" % func.qualname)
        return self.eval(last_return, func.scope, local)

    def comprehension(self, node, scope, local):
        if len(node.generators) != 1:
            raise Unresolved("nested comprehension")
        gen = node.generators[0]
        if not isinstance(gen.target, ast.Name):
            raise Unresolved("comprehension target")
        out = []
        for item in self.iterate(self.eval(gen.iter, scope, local)):
            inner = dict(local or {})
            inner[gen.target.id] = item
            if all(self.eval(cond, scope, inner) for cond in gen.ifs):
                out.append(self.eval(node.elt, scope, inner))
        if isinstance(node, ast.SetComp):
            return set(out)
        return out

    def iterate(self, value):
        if isinstance(value, ClassRef) and self.is_enum(value):
            return list(self.enum_members(value))
        if isinstance(value, dict):
            return list(value.keys())
        if isinstance(value, (set, frozenset)):
            return sorted(value, key=sort_key)
        if isinstance(value, (list, tuple, str)):
            return list(value)
        raise Unresolved("cannot iterate %r" % (value,))

    def is_enum(self, cls):
        for base in cls.node.bases:
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            if name in ENUM_BASES:
                return True
        return False

    def enum_members(self, cls):
        members = []
        counter = 0
        for stmt in cls.node.body:
            if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
                continue
            target = stmt.targets[0]
            if not isinstance(target, ast.Name) or target.id.startswith("_"):
                continue
            value_node = stmt.value
            if (
                isinstance(value_node, ast.Call)
                and getattr(value_node.func, "id", getattr(value_node.func, "attr", "")) == "auto"
            ):
                counter += 1
                value = counter
            else:
                value = self.eval(value_node, cls.scope)
                if isinstance(value, int):
                    counter = value
            members.append(EnumMember(target.id, value))
        return members


def sort_key(value):
    return (type(value).__name__, str(value))


# ---------------------------------------------------------------------------
# Argument records
# ---------------------------------------------------------------------------

# argparse's built-in actions and how many values each consumes.
BUILTIN_ACTIONS = {
    None: None,
    "store": None,
    "append": None,
    "extend": None,
    "store_true": 0,
    "store_false": 0,
    "store_const": 0,
    "append_const": 0,
    "count": 0,
    "help": 0,
    "version": 0,
}

TYPE_NAMES = {
    "str": "str",
    "int": "int",
    "float": "float",
    "json.loads": "json",
    "orjson.loads": "json",
}

DEPRECATED_HELP = re.compile(r"^\(?\s*deprecated\b", re.IGNORECASE)
REPLACEMENT_IN_HELP = re.compile(r"\b[Uu]se\s+'?(--[a-z0-9][a-z0-9-]*(?:=[A-Za-z0-9_{},<>-]+)?)")


class Registry:
    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.arguments = []
        self.by_flag = {}
        self.notes = []

    def add(self, record, origin):
        for flag in record["flags"]:
            if flag in self.by_flag:
                raise ExtractError(
                    "option %s is registered twice (%s and %s); argparse would refuse this"
                    % (flag, self.by_flag[flag], origin)
                )
            self.by_flag[flag] = origin
        self.arguments.append(record)


def type_name(value):
    if value is None:
        return None
    if isinstance(value, Sym):
        if value.qualname in TYPE_NAMES:
            return TYPE_NAMES[value.qualname]
        if value.name == "json_list_type":
            return "json_list"
        return value.name
    raise Unresolved("type %r" % (value,))


def choices_value(ev, node, scope, local, origin, registry):
    """Resolve a choices expression: a sorted list for sets, the declared
    order for sequences, "any" when it cannot be resolved statically."""
    if node is None:
        return None
    try:
        value = ev.eval(node, scope, local)
        return normalize_choices(value)
    except Unresolved as err:
        registry.notes.append("%s: choices not resolvable statically (%s)" % (origin, err))
        return "any"


def normalize_choices(value):
    if value is None:
        return None
    if isinstance(value, (set, frozenset)):
        items = sorted(value, key=sort_key)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, dict):
        items = list(value.keys())
    else:
        raise Unresolved("choices of type %s" % type(value).__name__)
    out = []
    for item in items:
        if isinstance(item, EnumMember):
            item = item.value
        if not isinstance(item, (str, int, float, bool)):
            raise Unresolved("choice %r is not plain data" % (item,))
        out.append(item)
    return out


def literal_default(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if isinstance(value, (list, tuple)):
        return all(literal_default(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and literal_default(v) for k, v in value.items())
    return False


def deprecation(action_name, new_flag, help_text):
    if action_name and action_name.startswith("Deprecated"):
        return {"new_flag": new_flag}
    if help_text and DEPRECATED_HELP.search(help_text.strip()):
        match = REPLACEMENT_IN_HELP.search(help_text)
        return {"new_flag": match.group(1) if match else None}
    return None


def default_dest(flags):
    for flag in flags:
        if flag.startswith("--"):
            return flag[2:].replace("-", "_")
    return flags[0].lstrip("-").replace("-", "_")


def custom_action_nargs(ev, action):
    """nargs of a custom argparse.Action: the default of its __init__'s nargs
    parameter when it declares one, otherwise argparse's default (one value)."""
    if not isinstance(action, ClassRef):
        raise Unresolved("action %r" % (action,))
    for stmt in action.node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            args = stmt.args
            positional = args.args
            defaults = args.defaults
            offset = len(positional) - len(defaults)
            for index, arg in enumerate(positional):
                if arg.arg == "nargs" and index >= offset:
                    return ev.eval(defaults[index - offset], action.scope)
            for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                if arg.arg == "nargs" and default is not None:
                    return ev.eval(default, action.scope)
    return None


def build_record(flags, dest, action, type_, choices, nargs, required, default, has_default, help_text, new_flag):
    """The JSON record of one argument; `action` is a string or a Sym."""
    if isinstance(action, Sym):
        action_name = action.name
        if action.qualname.endswith("argparse.BooleanOptionalAction"):
            action_name = "boolean_optional"
    else:
        action_name = action or "store"
    if action_name == "boolean_optional":
        expanded = []
        for flag in flags:
            expanded.append(flag)
            if flag.startswith("--"):
                expanded.append("--no-" + flag[2:])
        flags = expanded
        nargs = 0
    record = {
        "flags": list(flags),
        "dest": dest or default_dest(flags),
        "action": action_name,
        "type": type_,
        "choices": choices,
        "nargs": nargs,
        "required": bool(required),
        "deprecated": deprecation(action_name, new_flag, help_text),
    }
    if has_default and literal_default(default):
        record["default"] = list(default) if isinstance(default, tuple) else default
    return record


# ---------------------------------------------------------------------------
# Explicit parser.add_argument(...) calls
# ---------------------------------------------------------------------------


def keyword_map(call):
    out = {}
    for kw in call.keywords:
        if kw.arg is None:
            raise ExtractError("add_argument(**kwargs) at line %d cannot be read" % call.lineno)
        out[kw.arg] = kw.value
    return out


def try_eval(ev, node, scope, local, fallback=None):
    if node is None:
        return fallback
    try:
        return ev.eval(node, scope, local)
    except Unresolved:
        return fallback


def add_argument_call(ev, registry, call, scope, local):
    origin = "%s:%d" % (scope.name, call.lineno)
    flags = []
    for arg in call.args:
        value = ev.eval(arg, scope, local) if not isinstance(arg, ast.Starred) else None
        if not isinstance(value, str):
            raise ExtractError("%s: add_argument with a non-literal option string" % origin)
        flags.append(value)
    kwargs = keyword_map(call)
    action = try_eval(ev, kwargs.get("action"), scope, local)
    if kwargs.get("action") is not None and action is None:
        raise ExtractError("%s: action cannot be resolved" % origin)
    help_text = try_eval(ev, kwargs.get("help"), scope, local, "")
    if not isinstance(help_text, str):
        help_text = ""
    new_flag = try_eval(ev, kwargs.get("new_flag"), scope, local)
    has_nargs = "nargs" in kwargs
    nargs = ev.eval(kwargs["nargs"], scope, local) if has_nargs else None
    if isinstance(action, str) or action is None:
        if action not in BUILTIN_ACTIONS:
            raise ExtractError("%s: unknown action %r" % (origin, action))
        if not has_nargs:
            nargs = BUILTIN_ACTIONS[action]
    elif not (isinstance(action, Sym) and action.qualname.endswith("argparse.BooleanOptionalAction")):
        if not has_nargs:
            nargs = custom_action_nargs(ev, action)
    type_value = None
    if "type" in kwargs:
        type_value = type_name(ev.eval(kwargs["type"], scope, local))
    elif (action is None or action in ("store", "append", "extend")) or (
        isinstance(action, ClassRef) and nargs != 0
    ):
        type_value = "str"
    dest = try_eval(ev, kwargs.get("dest"), scope, local)
    required = try_eval(ev, kwargs.get("required"), scope, local, False)
    has_default = "default" in kwargs
    default = try_eval(ev, kwargs.get("default"), scope, local, NOT_LITERAL)
    if default is NOT_LITERAL:
        has_default = False
    if action in ("store_true",) and not has_default:
        has_default, default = True, False
    if action in ("store_false",) and not has_default:
        has_default, default = True, True
    choices = choices_value(ev, kwargs.get("choices"), scope, local, flags[0], registry)
    record = build_record(
        flags, dest, action, type_value, choices, nargs, required, default, has_default, help_text, new_flag
    )
    registry.add(record, origin)


# ---------------------------------------------------------------------------
# Dataclass / msgspec fields turned into arguments (arg_utils semantics)
# ---------------------------------------------------------------------------


class TypeInfo:
    """A parsed annotation: kind is one of name, optional, union, literal,
    list, annotated, other."""

    def __init__(self, kind, name=None, args=None, metas=None, values=None):
        self.kind = kind
        self.name = name
        self.args = args or []
        self.metas = metas or []
        self.values = values


TYPING_ALIASES = {
    "Optional": "Optional",
    "Union": "Union",
    "Literal": "Literal",
    "List": "list",
    "list": "list",
    "Annotated": "Annotated",
    "A": "Annotated",
}


def annotation_kind(ev, node, scope):
    """The typing construct a subscripted name stands for."""
    if isinstance(node, ast.Attribute):
        return TYPING_ALIASES.get(node.attr)
    if isinstance(node, ast.Name):
        name = node.id
        if name in scope.imports:
            module, attr = scope.imports[name]
            if attr == "A" and module.endswith("arg_utils"):
                return "Annotated"
            return TYPING_ALIASES.get(attr) if attr != "A" else None
        if name in scope.assigns:
            value = scope.assigns[name]
            if isinstance(value, ast.Name) and value.id == "Annotated":
                return "Annotated"
        return TYPING_ALIASES.get(name)
    return None


def parse_annotation(ev, node, scope):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return parse_annotation(ev, ast.parse(node.value, mode="eval").body, scope)
    if isinstance(node, ast.Constant) and node.value is None:
        return TypeInfo("name", name="None")
    if isinstance(node, ast.Name):
        return TypeInfo("name", name=node.id)
    if isinstance(node, ast.Attribute):
        return TypeInfo("name", name=node.attr)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left = parse_annotation(ev, node.left, scope)
        right = parse_annotation(ev, node.right, scope)
        parts = []
        for part in (left, right):
            parts.extend(part.args if part.kind == "union" else [part])
        return TypeInfo("union", args=parts)
    if isinstance(node, ast.Subscript):
        kind = annotation_kind(ev, node.value, scope)
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if kind == "Annotated":
            return TypeInfo("annotated", args=[parse_annotation(ev, elts[0], scope)], metas=elts[1:])
        if kind == "Optional":
            return TypeInfo("union", args=[parse_annotation(ev, elts[0], scope), TypeInfo("name", name="None")])
        if kind == "Union":
            return TypeInfo("union", args=[parse_annotation(ev, e, scope) for e in elts])
        if kind == "Literal":
            return TypeInfo("literal", values=[ev.eval(e, scope) for e in elts])
        if kind == "list":
            return TypeInfo("list", args=[parse_annotation(ev, e, scope) for e in elts])
        return TypeInfo("other", name=ast.unparse(node.value))
    raise ExtractError("%s: annotation %s cannot be read" % (scope.name, ast.unparse(node)))


def is_help_string(node):
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return is_help_string(node.left) or is_help_string(node.right)
    return False


def is_arg_call(ev, node, scope):
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name is None:
        return False
    if isinstance(func, ast.Name) and name in scope.imports:
        return scope.imports[name][1] == "Arg"
    return name == "Arg"


def unwrap_optional(t):
    if t.kind == "union":
        non_none = [a for a in t.args if not (a.kind == "name" and a.name == "None")]
        if len(non_none) == 1:
            return non_none[0]
    return t


def infer_type(t):
    if t is not None and t.kind == "name" and t.name in ("str", "int", "float"):
        return t.name
    return "str"


def python_type_of(value):
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(type(value), "str")


def field_default(ev, node, scope):
    """(has_default, value); value is NOT_LITERAL when it cannot be read."""
    if node is None:
        return False, None
    if isinstance(node, ast.Call):
        func = ast.unparse(node.func)
        if func.endswith("field"):
            kwargs = keyword_map(node)
            if "default" in kwargs:
                return True, try_eval(ev, kwargs["default"], scope, None, NOT_LITERAL)
            if "default_factory" in kwargs:
                factory = try_eval(ev, kwargs["default_factory"], scope, None)
                if isinstance(factory, Sym) and factory.qualname in ("list", "dict", "set"):
                    return True, {"list": [], "dict": {}, "set": []}[factory.qualname]
                return True, NOT_LITERAL
    return True, try_eval(ev, node, scope, None, NOT_LITERAL)


class _NotLiteral:
    pass


NOT_LITERAL = _NotLiteral()


def dataclass_field(ev, registry, scope, stmt, class_name):
    name = stmt.target.id
    origin = "%s.%s.%s" % (scope.name, class_name, name)
    t = parse_annotation(ev, stmt.annotation, scope)
    if t.kind != "annotated":
        return  # Fields without an Arg or help string are not registered.
    raw = t.args[0]
    meta = None
    for m in t.metas:
        if is_arg_call(ev, m, scope):
            meta = keyword_map(m)
            break
        if is_help_string(m):
            meta = {"help": m}
            break
    if meta is None:
        return

    def get(key, default=None):
        if key not in meta:
            return default
        return ev.eval(meta[key], scope)

    if get("no_cli", False):
        return
    cli_name = get("cli_name") or "--" + name.replace("_", "-")
    flags = [cli_name] + list(get("aliases") or [])
    has_default, default = field_default(ev, stmt.value, scope)
    auto_dest = cli_name.lstrip("-").replace("-", "_")
    dest = name if name != auto_dest else None
    help_text = try_eval(ev, meta.get("help"), scope, None, "")
    if not isinstance(help_text, str):
        help_text = ""
    arg_nargs = get("nargs")
    arg_required = get("required")
    type_parser = None
    if "type_parser" in meta:
        type_parser = type_name(ev.eval(meta["type_parser"], scope))
    choices_node = meta.get("choices")

    def choices():
        return choices_value(ev, choices_node, scope, None, cli_name, registry)

    def finish(action, type_, ch, nargs, required=False, new_flag=None):
        record = build_record(
            flags,
            dest or name,
            action,
            type_,
            ch,
            nargs,
            required,
            default,
            has_default and default is not NOT_LITERAL,
            help_text,
            new_flag,
        )
        registry.add(record, origin)

    # Custom action.
    if "action" in meta:
        action = ev.eval(meta["action"], scope)
        action_kwargs = get("action_kwargs") or {}
        nargs = action_kwargs.get("nargs")
        if isinstance(action, str):
            if action not in BUILTIN_ACTIONS:
                raise ExtractError("%s: unknown action %r" % (origin, action))
            if "nargs" not in action_kwargs:
                nargs = BUILTIN_ACTIONS[action]
        elif not action.qualname.endswith("argparse.BooleanOptionalAction") and "nargs" not in action_kwargs:
            nargs = custom_action_nargs(ev, action)
        type_ = type_name(action_kwargs.get("type")) if "type" in action_kwargs else None
        if type_ is None and nargs != 0 and not (
            isinstance(action, Sym) and action.qualname.endswith("argparse.BooleanOptionalAction")
        ):
            type_ = "str"
        ch = normalize_choices(action_kwargs.get("choices")) if "choices" in action_kwargs else None
        finish(action, type_, ch, nargs, new_flag=action_kwargs.get("new_flag"))
        return

    inner = unwrap_optional(raw)

    if inner.kind == "literal":
        ch = choices() if choices_node is not None else normalize_choices(inner.values)
        type_ = type_parser or (python_type_of(inner.values[0]) if inner.values else "str")
        if type_ == "bool":
            type_ = "str"  # arg_utils maps anything but str/int/float to str.
        finish("store", type_, ch, None)
        return

    if inner.kind == "list" and type_parser is None:
        elem = inner.args[0] if inner.args else None
        finish("store", infer_type(elem), choices() if choices_node is not None else None, arg_nargs or "+")
        return

    if inner.kind == "name" and inner.name == "bool":
        finish("store_true", None, None, 0)
        return

    required = arg_required is True or (arg_required is None and not has_default)
    finish("store", type_parser or infer_type(inner), choices() if choices_node is not None else None, arg_nargs, required)


def dataclass_arguments(ev, registry, scope, class_names):
    for class_scope, class_node in class_names:
        for stmt in class_node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                dataclass_field(ev, registry, class_scope, stmt, class_node.name)


def server_args_field_sources(ev, scope, cls):
    """The classes whose annotated fields make up ServerArgs: ServerArgs
    itself, plus the namespace classes passed to collect_input_fields(...)."""
    sources = [(scope, cls)]
    for stmt in scope.tree.body:
        value = getattr(stmt, "value", None)
        if not isinstance(value, ast.Call):
            continue
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name != "collect_input_fields":
            continue
        if len(value.args) != 1:
            raise ExtractError("collect_input_fields call at line %d cannot be read" % stmt.lineno)
        arg = value.args[0]
        if isinstance(arg, ast.Name):
            arg = scope.assigns.get(arg.id)
        if not isinstance(arg, (ast.List, ast.Tuple)):
            raise ExtractError("the namespace list given to collect_input_fields cannot be read")
        for elt in arg.elts:
            ref = ev.eval(elt, scope)
            if not isinstance(ref, ClassRef):
                raise ExtractError("namespace %s is not a class in the wheel" % ast.unparse(elt))
            sources.append((ref.scope, ref.node))
    return sources


# ---------------------------------------------------------------------------
# Walking add_cli_args
# ---------------------------------------------------------------------------


def mentions_parser(call, parser_name):
    for arg in list(call.args) + [kw.value for kw in call.keywords]:
        if isinstance(arg, ast.Name) and arg.id == parser_name:
            return True
    return False


def walk_registration(ev, registry, scope, func_node, parser_name, server_args_cls, local=None):
    local = dict(local or {})
    for stmt in func_node.body:
        walk_statement(ev, registry, scope, stmt, parser_name, server_args_cls, local)


def walk_statement(ev, registry, scope, stmt, parser_name, server_args_cls, local):
    if isinstance(stmt, ast.Assign):
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                local[target.id] = stmt.value
        return
    if isinstance(stmt, ast.ImportFrom):
        module = resolve_relative(scope.name, stmt.module, stmt.level)
        for alias in stmt.names:
            local[alias.asname or alias.name] = ("__import__", module, alias.name)
        return
    if isinstance(stmt, (ast.If, ast.For, ast.With, ast.Try)):
        for inner in getattr(stmt, "body", []) + getattr(stmt, "orelse", []):
            walk_statement(ev, registry, scope, inner, parser_name, server_args_cls, local)
        return
    for node in ast.walk(stmt):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "add_argument"
            and isinstance(func.value, ast.Name)
            and func.value.id == parser_name
        ):
            add_argument_call(ev, registry, node, scope, local)
            continue
        if not mentions_parser(node, parser_name):
            continue
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "add_cli_args_from_dataclass":
            sources = server_args_field_sources(ev, scope, server_args_cls)
            dataclass_arguments(ev, registry, scope, [(s, c) for s, c in sources])
            continue
        target = None
        if isinstance(func, ast.Name) and func.id in scope.functions:
            target = scope.functions[func.id]
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in ("ServerArgs", "cls", "self"):
                for item in server_args_cls.body:
                    if isinstance(item, ast.FunctionDef) and item.name == func.attr:
                        target = item
        if target is None:
            raise ExtractError(
                "%s:%d: %s(...) receives the parser and cannot be followed"
                % (scope.name, node.lineno, ast.unparse(func))
            )
        params = [a.arg for a in target.args.args]
        position = [i for i, a in enumerate(node.args) if isinstance(a, ast.Name) and a.id == parser_name]
        inner_parser = params[position[0]] if position else parser_name
        walk_registration(ev, registry, scope, target, inner_parser, server_args_cls)


def find_server_args(scope):
    cls = scope.classes.get("ServerArgs")
    if cls is None:
        raise ExtractError("%s defines no class ServerArgs" % scope.name)
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "add_cli_args":
            params = [a.arg for a in item.args.args]
            return cls, item, params[-1]
    raise ExtractError("ServerArgs has no add_cli_args method")


def speculative_algorithms(ev, wheel, registry):
    """Names accepted by --speculative-algorithm at server start: the members
    of the SpeculativeAlgorithm enum (except NONE) and reserved aliases."""
    scope = wheel.scope(SPEC_INFO_MODULE)
    if scope is None or "SpeculativeAlgorithm" not in scope.classes:
        registry.notes.append("SpeculativeAlgorithm enum not found; no runtime choices recorded")
        return None
    cls = ClassRef(scope, scope.classes["SpeculativeAlgorithm"])
    names = {m.name for m in ev.enum_members(cls) if m.name != "NONE"} if ev.is_enum(cls) else set()
    if not names:
        registry.notes.append("SpeculativeAlgorithm is not an enum with members; no runtime choices recorded")
        return None
    registry_scope = wheel.scope(SPEC_REGISTRY_MODULE)
    if registry_scope is not None and "_RESERVED_ALIASES" in registry_scope.assigns:
        try:
            names |= set(ev.eval(registry_scope.assigns["_RESERVED_ALIASES"], registry_scope))
        except Unresolved as err:
            registry.notes.append("reserved speculative aliases not resolvable (%s)" % err)
    return sorted(names)


def extract(wheel_path):
    wheel = Wheel(wheel_path)
    ev = Evaluator(wheel)
    registry = Registry(ev)
    scope = wheel.scope(SERVER_ARGS_MODULE)
    if scope is None:
        raise ExtractError("the wheel has no %s" % SERVER_ARGS_MODULE)
    cls, method, parser_name = find_server_args(scope)
    walk_registration(ev, registry, scope, method, parser_name, cls)
    if not registry.arguments:
        raise ExtractError("no arguments were found")
    algorithms = speculative_algorithms(ev, wheel, registry)
    if algorithms is not None:
        for record in registry.arguments:
            if "--speculative-algorithm" in record["flags"]:
                record["runtime_choices"] = algorithms
    arguments = sorted(registry.arguments, key=lambda r: r["flags"][0])
    doc = {
        "sglang_version": wheel.version(),
        "source": SERVER_ARGS_MODULE.replace(".", "/") + ".py",
        "arguments": arguments,
    }
    return doc, registry.notes


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: extract_args.py WHEEL > sglang-args.json\n")
        return 2
    try:
        doc, notes = extract(argv[1])
    except (ExtractError, Unresolved) as err:
        sys.stderr.write("extract_args: %s\n" % err)
        return 1
    for note in sorted(set(notes)):
        sys.stderr.write("note: %s\n" % note)
    json.dump(doc, sys.stdout, indent=1, sort_keys=True, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
