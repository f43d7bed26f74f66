"""Tests for extract_args.py against a small synthetic wheel.

Run: python3 -m unittest discover -s hack/sglang
"""

import io
import json
import os
import sys
import tempfile
import textwrap
import unittest
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import extract_args  # noqa: E402

ARG_UTILS = """
from typing import Annotated
A = Annotated
class Arg:
    pass
def add_cli_args_from_dataclass(parser, cls):
    pass
"""

ACTIONS = """
import argparse
class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)
class PathAction(argparse.Action):
    pass
"""

CHOICES = """
LAYOUTS = ["layer_first", "page_first"]
BACKENDS = frozenset({"zeta", "alpha"})
BACKEND_CHOICES = set(BACKENDS)
EXTRA = LAYOUTS + ["page_head"]
"""

NAMES = """
PARSER_NAMES = ["b", "a"]
"""

FIELDS = """
from __future__ import annotations
import argparse
import json
from typing import List, Literal, Optional
import msgspec
from sglang.srt.arg_groups.arg_utils import A, Arg
from sglang.srt.arg_groups.argparse_actions import PathAction
from sglang.srt.arg_groups.choices import EXTRA, LAYOUTS
from sglang.srt.utils import json_list_type, dynamic_choices

class Kinds:
    ALL = (FULL, OFF) = ("full", "off")

class Memory(msgspec.Struct):
    _NS_PATH = "memory"
    model_path: A[str, Arg(help="Model.", aliases=["--model"])]
    layout: A[str, Arg(help="Layout.", choices=LAYOUTS)] = "page_first"
    layout_extra: A[Optional[str], Arg(help="More.", choices=EXTRA)] = None
    mode: A[Literal["cache", "buffer_only"], "Mode."] = "cache"
    ratio: A[Optional[float], "Ratio."] = None
    size: A[int, "Size."] = 0
    enabled: A[bool, Arg(help="Switch.", aliases=["--on"])] = False
    tri: A[Optional[bool], Arg(help="Tri.", action=argparse.BooleanOptionalAction)] = None
    hidden: A[bool, Arg(no_cli=True)] = False
    plain: int = 3
    ids: A[Optional[List[int]], "Ids."] = None
    cfg: A[Optional[dict], Arg(help="Cfg.", type_parser=json.loads)] = None
    lst: A[Optional[str], Arg(help="Lst.", type_parser=json_list_type)] = None
    renamed: A[int, Arg(help="Renamed.", cli_name="--other-name")] = 1
    paths: A[Optional[List[str]], Arg(help="Paths.", action=PathAction, action_kwargs={"type": str, "nargs": "*"})] = None
    kind: A[Optional[str], Arg(help="Kind.", choices=Kinds.ALL)] = None
    dyn: A[Optional[str], Arg(help="Dyn.", choices=dynamic_choices())] = None
    old: A[bool, "(Deprecated, use --on) Old switch."] = False
"""

SERVER_ARGS = """
import argparse
import msgspec
from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass
from sglang.srt.arg_groups.argparse_actions import DeprecatedStoreTrueAction
from sglang.srt.arg_groups.choices import BACKEND_CHOICES
from sglang.srt.arg_groups.fields.memory import Memory
from sglang.srt.arg_groups.fields import collect_input_fields

def _parser_choices():
    from sglang.srt.names import PARSER_NAMES
    return list(PARSER_NAMES)

class ServerArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        backends = set(BACKEND_CHOICES)
        if False:
            backends.add("extra")
        parser.add_argument("--backend", type=str, choices=backends, default=None)
        parser.add_argument("--parser", type=str, choices=["auto"] + _parser_choices())
        parser.add_argument("--legacy", action=DeprecatedStoreTrueAction, new_flag="--on")
        parser.add_argument("--count", type=int, nargs=2)
        {extra}

_INPUT_NAMESPACES = [Memory]
_annotations, _defaults, _namespaces = collect_input_fields(_INPUT_NAMESPACES)
"""

SPEC_INFO = """
from enum import Enum, auto
class SpeculativeAlgorithm(Enum):
    EAGLE = auto()
    DSPARK = auto()
    NONE = auto()
"""

SPEC_REGISTRY = """
_RESERVED_ALIASES = frozenset({"NEXTN"})
"""


def build_wheel(directory, extra=""):
    path = os.path.join(directory, "sglang-9.9.9-py3-none-any.whl")
    files = {
        "sglang-9.9.9.dist-info/METADATA": "Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n",
        "sglang/srt/arg_groups/arg_utils.py": ARG_UTILS,
        "sglang/srt/arg_groups/argparse_actions.py": ACTIONS,
        "sglang/srt/arg_groups/choices.py": CHOICES,
        "sglang/srt/arg_groups/fields/__init__.py": "def collect_input_fields(x):\n    pass\n",
        "sglang/srt/arg_groups/fields/memory.py": FIELDS,
        "sglang/srt/names.py": NAMES,
        "sglang/srt/utils.py": "def json_list_type(v):\n    pass\n",
        "sglang/srt/server_args.py": SERVER_ARGS.replace("{extra}", extra),
        "sglang/srt/speculative/spec_info.py": SPEC_INFO,
        "sglang/srt/speculative/spec_registry.py": SPEC_REGISTRY,
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, text in sorted(files.items()):
            z.writestr(name, textwrap.dedent(text))
    return path


class ExtractTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def extract(self, extra=""):
        doc, notes = extract_args.extract(build_wheel(self.tmp.name, extra))
        return doc, notes, {a["flags"][0]: a for a in doc["arguments"]}

    def test_version_and_sorting(self):
        doc, _, _ = self.extract()
        self.assertEqual(doc["sglang_version"], "9.9.9")
        firsts = [a["flags"][0] for a in doc["arguments"]]
        self.assertEqual(firsts, sorted(firsts))

    def test_dataclass_fields(self):
        _, _, args = self.extract()
        self.assertNotIn("--hidden", args, "no_cli fields must not be registered")
        self.assertNotIn("--plain", args, "fields without an annotation marker are skipped")
        cases = {
            "--model-path": {"flags": ["--model-path", "--model"], "type": "str", "required": True, "nargs": None},
            "--layout": {"choices": ["layer_first", "page_first"], "default": "page_first", "type": "str"},
            "--layout-extra": {"choices": ["layer_first", "page_first", "page_head"]},
            "--mode": {"choices": ["cache", "buffer_only"], "type": "str"},
            "--ratio": {"type": "float", "required": False},
            "--size": {"type": "int", "default": 0},
            "--enabled": {"flags": ["--enabled", "--on"], "action": "store_true", "nargs": 0, "type": None},
            "--tri": {"flags": ["--tri", "--no-tri"], "action": "boolean_optional", "nargs": 0},
            "--ids": {"type": "int", "nargs": "+"},
            "--cfg": {"type": "json"},
            "--lst": {"type": "json_list"},
            "--other-name": {"dest": "renamed", "type": "int"},
            "--paths": {"action": "PathAction", "nargs": "*", "type": "str"},
            "--kind": {"choices": ["full", "off"]},
            "--dyn": {"choices": "any"},
            "--old": {"deprecated": {"new_flag": "--on"}},
        }
        for flag, want in cases.items():
            with self.subTest(flag=flag):
                self.assertIn(flag, args)
                for key, value in want.items():
                    self.assertEqual(args[flag][key], value, "%s.%s" % (flag, key))

    def test_explicit_arguments(self):
        _, notes, args = self.extract()
        self.assertEqual(args["--backend"]["choices"], ["alpha", "zeta"], "set choices are sorted")
        self.assertEqual(args["--parser"]["choices"], ["auto", "b", "a"])
        self.assertEqual(args["--legacy"]["deprecated"], {"new_flag": "--on"})
        self.assertEqual(args["--legacy"]["nargs"], 0, "nargs comes from the action's __init__")
        self.assertEqual(args["--count"]["nargs"], 2)
        self.assertTrue(any("--dyn" in n for n in notes), notes)

    def test_runtime_choices_of_speculative_algorithm(self):
        _, _, args = self.extract('parser.add_argument("--speculative-algorithm", type=str)')
        self.assertEqual(args["--speculative-algorithm"]["runtime_choices"], ["DSPARK", "EAGLE", "NEXTN"])

    def test_duplicate_option_is_an_error(self):
        with self.assertRaises(extract_args.ExtractError):
            self.extract('parser.add_argument("--on", action="store_true")')

    def test_unfollowable_parser_use_is_an_error(self):
        with self.assertRaises(extract_args.ExtractError):
            self.extract("somewhere.register(parser)")

    def test_main_writes_stable_json(self):
        wheel = build_wheel(self.tmp.name)
        outputs = []
        for _ in range(2):
            buf = io.StringIO()
            stdout, stderr = sys.stdout, sys.stderr
            sys.stdout, sys.stderr = buf, io.StringIO()
            try:
                self.assertEqual(extract_args.main(["extract_args.py", wheel]), 0)
            finally:
                sys.stdout, sys.stderr = stdout, stderr
            outputs.append(buf.getvalue())
        self.assertEqual(outputs[0], outputs[1])
        self.assertEqual(json.loads(outputs[0])["sglang_version"], "9.9.9")


if __name__ == "__main__":
    unittest.main()
