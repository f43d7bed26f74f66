#!/usr/bin/env python3
"""SGLang's own verdict on the command lines the operator renders (test/conformance).

For each command line (the arguments after `python3 -m sglang.launch_server`) this does what
launch_server does before it starts a process:

  1. load_plugins();
  2. prepare_server_args(argv): SGLang's parser and ServerArgs.from_cli_args;
  3. server_args.resolve_once(): the resolution pipeline (every handle_* / validate_* hook,
     the model config read from --model-path, the speculative, HiCache, parallel and
     disaggregation checks), as run_server does first;
  4. server_args.check_server_args(), as Engine._launch_subprocesses does before it publishes
     the record and allocates ports.

It stops there: what follows (_set_envs_and_config's package version checks, the tokenizer and
chat-template detection, ports, the scheduler processes) reads the serving image and the
weights, not the command line.

SGLang is imported once; every command line then runs in a process forked from this one, so
that no line sees what another left behind (environment variables a hook sets, caches,
the published runtime context).

This machine has no GPU. The facts of the GPU the operator's nodes have are stubbed, and only
those (never a check): see STUBS below and docs/compatibility.md.

Input: the path of a JSON file {"gpu": {"name": "NVIDIA H100 80GB HBM3", "memoryGiB": 80,
"capability": [9, 0], "count": 8}, "models": {"<rendered model path>": "<local directory with
its config.json>"}, "lines": [{"name": "...", "args": [...]}]}. A rendered --model-path or
--speculative-draft-model-path found in "models" is replaced by its local directory, which
holds the architecture's config.json and no weights (SGLang reads only the config before it
starts processes).

Output: one JSON line per command line, in input order: {"name": ..., "accepted": true} or
{"name": ..., "accepted": false, "error": "<exception type>: <SGLang's message>"}, then a
last line {"done": true, "seconds": {"import": s, "lines": s}}.
"""

import json
import os
import sys
import time
import traceback
import warnings

warnings.filterwarnings("ignore")

IMPORT_START = time.monotonic()

with open(sys.argv[1]) as f:
    CASE = json.load(f)
GPU = CASE["gpu"]

# SGLang is imported as what this machine is, a CPU host: imported as a CUDA host, its modules
# would load the CUDA kernels (sgl_kernel), which the serving image has and this venv has not.
import torch  # noqa: E402


# Packages of the serving image that the conformance venv (hack/sglang/requirements.txt: what
# SGLang's HiCache storage code needs on CPU) does not install, and that modules the DSpark hook
# imports to read the draft's config import in turn: SGLang's OpenAI API types (openai), its
# function-call parsers (partial_json_parser), its expert-distribution metrics (einops). No
# argument check reads them.
ABSENT_PACKAGES = ("openai", "partial_json_parser", "einops")


def _stub_absent_packages():
    """STUB: each package of ABSENT_PACKAGES that is not installed becomes a module whose every
    name is an empty class: a pydantic model for openai's payload types (an empty TypedDict for
    its *Param request types), an Exception subclass otherwise."""
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import types

    from pydantic import BaseModel, ConfigDict
    from typing_extensions import TypedDict

    absent = [p for p in ABSENT_PACKAGES if importlib.util.find_spec(p) is None]

    class _Module(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            if not self.__name__.startswith("openai"):
                cls = type(name, (Exception,), {"__module__": self.__name__})
            elif name.endswith("Param"):
                cls = TypedDict(name, {}, total=False)
            else:
                cls = type(name, (BaseModel,), {"model_config": ConfigDict(extra="allow"), "__module__": self.__name__})
            setattr(self, name, cls)
            return cls

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path, target=None):
            if fullname.split(".")[0] in absent:
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            return None

        def create_module(self, spec):
            m = _Module(spec.name)
            m.__path__ = []
            return m

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, _Finder())


_stub_absent_packages()

from sglang.srt.plugins import load_plugins  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402
from sglang.srt.runtime_context import override_platform  # noqa: E402
from sglang.srt.utils import common as _common  # noqa: E402

# The hooks import most of their modules on first use; import them here, once, so that every
# forked line does not pay for them.
import importlib  # noqa: E402
import pkgutil  # noqa: E402
import sglang.srt.arg_groups as _groups  # noqa: E402

for _m in pkgutil.iter_modules(_groups.__path__):
    importlib.import_module("sglang.srt.arg_groups." + _m.name)
import sglang.srt.configs.model_config  # noqa: E402,F401

# Modules the hooks import on first use that load kernels at import time on a CUDA host: imported
# here, on this CPU host, before the GPU stubs below.
import sglang.srt.speculative.dspark_components.dspark_config  # noqa: E402,F401

# ---------------------------------------------------------------------------------------------
# STUBS: the GPU of the nodes the command lines are rendered for, installed after the import and
# before any line runs. Each replaces a query of the machine; no check is replaced.
# ---------------------------------------------------------------------------------------------


class _DeviceProperties:
    def __init__(self):
        self.name = GPU["name"]
        self.total_memory = int(GPU["memoryGiB"]) << 30
        self.major, self.minor = GPU["capability"]
        self.multi_processor_count = 132
        self.is_integrated = False


_MEMORY = int(GPU["memoryGiB"]) << 30
STUBS = {
    # A CUDA device is present (SGLang's is_cuda() also reads torch.version.cuda, set in the
    # pinned CUDA build of torch).
    "is_available": lambda: True,
    "device_count": lambda: int(GPU["count"]),
    # It is not initialized: SGLang then asks NVML (absent) and falls back to the capability.
    "is_initialized": lambda: False,
    # Its compute capability (H100: 9.0), which picks kernels and attention backends.
    "get_device_capability": lambda device=None: tuple(GPU["capability"]),
    "get_device_name": lambda device=None: GPU["name"],
    "get_device_properties": lambda device=None: _DeviceProperties(),
    # Its memory: SGLang asks nvidia-smi first (absent here) and falls back to mem_get_info.
    "mem_get_info": lambda device=None: (_MEMORY, _MEMORY),
}
for _name, _fn in STUBS.items():
    setattr(torch.cuda, _name, _fn)
if torch.version.cuda is None:
    raise SystemExit("the venv's torch is not a CUDA build: is_cuda() would stay false")
# SGLang caches its device probes (is_cuda, is_sm90_supported, ...): forget what the import
# found on this CPU host, so that they answer from the stubs above.
for _v in vars(_common).values():
    if callable(getattr(_v, "cache_clear", None)):
        _v.cache_clear()
_major, _minor = GPU["capability"]
# The platform facts SGLang's hooks read (runtime_context.get_platform()), through SGLang's own
# override: an NVIDIA GPU of that capability, with FlashInfer installed (the serving image has it).
override_platform(
    is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False,
    is_sm90=(_major == 9), is_sm100=(_major == 10), is_sm100_or_sm110=(_major in (10, 11)),
    is_sm110=(_major == 11), is_sm120=(_major == 12), is_blackwell=(_major >= 10),
    is_hopper_with_cuda_12_3=(_major == 9), has_amx=False, has_flashinfer=True,
    device_sm=_major * 10 + _minor, device_capability=(_major, _minor),
).install()

IMPORT_SECONDS = time.monotonic() - IMPORT_START


def localize(args):
    """The command line with the model paths replaced by their local config directories."""
    models = CASE.get("models", {})
    out = list(args)
    for i, a in enumerate(out[:-1]):
        if a in ("--model-path", "--model", "--speculative-draft-model-path", "--speculative-draft-model") and out[i + 1] in models:
            out[i + 1] = models[out[i + 1]]
    return out


def check(args):
    """Steps 1 to 4 of the module's description; raises SGLang's refusal."""
    load_plugins()
    server_args = prepare_server_args(args)
    server_args.resolve_once()
    server_args.check_server_args()


def message(exc):
    text = str(exc).strip()
    if not text and isinstance(exc, AssertionError):
        # A bare assert: name the check by its source line.
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        text = "assert at %s:%d: %s" % (os.path.relpath(tb.filename, os.path.dirname(_groups.__path__[0])), tb.lineno, tb.line)
    return "%s: %s" % (type(exc).__name__, text)


def run_line(line):
    """Runs one line in a forked child; returns its verdict."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            # SGLang logs what it resolves; only the verdict goes to stdout.
            os.dup2(2, 1)
            try:
                check(localize(line["args"]))
                verdict = {"accepted": True}
            except BaseException as exc:  # SystemExit from argparse included
                verdict = {"accepted": False, "error": message(exc)}
                print("[serverargs] %s:\n%s" % (line["name"], traceback.format_exc()), file=sys.stderr)
            os.write(w, json.dumps(verdict).encode())
        finally:
            os.close(w)
            os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 1 << 16)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return {"accepted": False, "error": "the check's process ended with status %d and no verdict" % status}
    return json.loads(b"".join(chunks))


def main():
    start = time.monotonic()
    for line in CASE["lines"]:
        verdict = run_line(line)
        verdict["name"] = line["name"]
        print(json.dumps(verdict), flush=True)
    print(json.dumps({"done": True, "seconds": {"import": IMPORT_SECONDS, "lines": time.monotonic() - start}}), flush=True)


if __name__ == "__main__":
    main()
