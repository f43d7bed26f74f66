#!/usr/bin/env python3
"""SGLang ranks' HiCache L3 storage, run with SGLang's own code against a real Mooncake master.

The conformance suite (test/conformance) runs this once per case. It imports SGLang once, then
forks one process per rank (each with its own Mooncake client, segment and host pools, all made
after the fork). Each rank process

  1. parses the SGLang command line the operator rendered for the rank with SGLang's own argument
     parser, and the rendered --hicache-storage-backend-extra-config with SGLang's own parser of
     it; the MOONCAKE_* environment the operator renders is the process environment;
  2. builds SGLang's host pools on CPU for a tiny model of the given architecture (few layers,
     small heads): MHATokenToKVPoolHost, MLATokenToKVPoolHost, MambaPoolHost, LogicalHostPool,
     DeepSeekV4PagedHostPool, DeepSeekV4StateHostPool, in a HostPoolGroup for hybrid models;
  3. fills HiCacheStorageConfig the way HiCacheController._generate_storage_config does, creates
     the backend with StorageBackendFactory.create_backend("mooncake", ...) and registers the
     pools (register_mem_pool_host, register_mem_host_pool_v2);
  4. backs up pages through the cache controller's own code: write_storage() queues the
     operation and SGLang's backup_thread_func() runs it (backup_skip, should_backup,
     batch_set_v1/v2), with page hashes from SGLang's get_hash_str;
  5. reads every page it wrote back through batch_get_v1/v2 into other host slots and compares
     the bytes;
  6. answers SGLang's duty decision (backup_skip, should_backup) for every rank the suite names;
  7. reports one JSON line, then answers commands: "exists" reports what batch_exists /
     batch_exists_v2 find of its pages.

This process prints every rank's lines with the rank's "index" added, passes each command it
reads on stdin to every rank, and on "exit" (or end of input) stops them. Mooncake objects live
in the memory of the client that holds them, so the ranks stay alive until the suite has looked
at the master.

Input: the path of a JSON file {"ranks": [{"tpRank": R, "ppRank": S, "args": [the rank's
rendered command line]}, ...], "attention": "MHA|MLA|DSV4|HybridMambaMHA|HybridMambaMLA",
"pools": [...], "mambaConvBuffers": N, "draft": {"pools": [...], "hostPool": "MHA|MLA"} | null,
"pages": [[token ids], ...], "dutyRanks": [[tp, pp], ...]}.
"""

import ctypes
import json
import os
import queue
import sys
import threading
import time
import warnings

warnings.filterwarnings("ignore")

# Where a sidecar pool takes its host slots from, as SGLang's pool assembler declares them
# (SidecarPoolSpec in hybrid_pool_assembler.py): KV-derived pools share the anchor's slots, the
# DeepSeek-V4 compress-state pools the SWA pool's (every *_state pool). Other pools have their own.
SOURCE_POOL = {
    "deepseek_v4_c4": "kv",
    "deepseek_v4_c4_indexer": "kv",
    "deepseek_v4_c128": "kv",
    "indexer": "kv",
    "draft": "kv",
}

HEADS = 8  # KV heads of the tiny MHA model, split across attention-TP ranks
HEAD_DIM = 8
LAYERS = 2  # layers per PP stage
DEVICE_TOKENS = 64


def log(msg):
    print("[rank] " + msg, file=sys.stderr, flush=True)


IMPORT_START = time.monotonic()
import argparse

import torch

from sglang.srt.managers.cache_controller import HiCacheController, storage_model_name
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig, PoolName, PoolTransfer, PoolHitPolicy
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
from sglang.srt.mem_cache.memory_pool_host import (
    DeepSeekV4PagedHostPool,
    DeepSeekV4StateHostPool,
    LogicalHostPool,
)
from sglang.srt.mem_cache.pool_host.group import HostPoolGroup, PoolEntry
from sglang.srt.mem_cache.pool_host.mamba import MambaPoolHost
from sglang.srt.mem_cache.device_pool_info import MambaStateBufferInfo
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage import StorageBackendFactory
from sglang.srt.mem_cache.utils import get_hash_str
from sglang.srt.server_args import ServerArgs


def run_rank(case, rank, out, cmds, started):
    """One rank, in its own process: steps 1 to 7 of the module's description."""

    def send(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    tp_rank, pp_rank = rank["tpRank"], rank["ppRank"]

    # 1. The rendered command line, parsed by SGLang's parser.
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(rank["args"])
    if ns.hicache_storage_backend != "mooncake":
        raise SystemExit("the rendered command line has --hicache-storage-backend %r, not mooncake" % ns.hicache_storage_backend)
    tp_size, pp_size = ns.tp_size, ns.pp_size
    attn_tp_size = tp_size // ns.dp_size if ns.enable_dp_attention else tp_size
    page_size = ns.page_size or 1
    layout = ns.hicache_mem_layout
    served = ns.served_model_name or ns.model_path
    extra_config = HybridCacheController.parse_storage_backend_extra_config(
        ns.hicache_storage_backend_extra_config
    )[0]
    tp_lcm_size = extra_config.pop("tp_lcm_size", None)
    attention = case["attention"]
    pools = case["pools"]
    draft = case.get("draft")

    # 2. SGLang's host pools for a tiny model.
    n_pages = len(case["pages"])
    host_tokens = 4 * n_pages * page_size

    def mha_host(label):
        heads = max(1, HEADS // attn_tp_size)
        dev = MHATokenToKVPool(DEVICE_TOKENS, page_size, torch.bfloat16, heads, HEAD_DIM, LAYERS, "cpu", False,
                               start_layer=0, end_layer=LAYERS)
        info = dev.get_device_pool_infos()[0].buffer_info
        return MHATokenToKVPoolHost(info, 0, 0, page_size, layout, pin_memory=False, device_capacity_tokens=dev.size,
                                    start_layer=0, end_layer=LAYERS, pool_label=label, host_token_capacity=host_tokens)

    def mla_host(label):
        dev = MLATokenToKVPool(DEVICE_TOKENS, page_size, torch.bfloat16, 32, 16, LAYERS, "cpu", False,
                               start_layer=0, end_layer=LAYERS)
        info = dev.get_device_pool_infos()[0].buffer_info
        return MLATokenToKVPoolHost(info, 0, 0, page_size, layout, pin_memory=False, device_capacity_tokens=dev.size,
                                    start_layer=0, end_layer=LAYERS, target_layer_num=LAYERS, pool_label=label,
                                    host_token_capacity=host_tokens)

    def dsv4_paged(name):
        item_bytes = 64
        bufs = [torch.zeros(DEVICE_TOKENS // page_size, item_bytes, dtype=torch.uint8) for _ in range(LAYERS)]
        return DeepSeekV4PagedHostPool(pool_name=name, device_buffers=bufs, item_bytes=item_bytes,
                                       num_host_pages=4 * n_pages, slot_page_size=page_size, layout=layout,
                                       pin_memory=False)

    class _ScoreBuffer:
        def __init__(self, t):
            self.kv_score = t

    class _StatePool:
        """The device CompressStatePool's fields a DeepSeekV4StateHostPool reads (GPU memory)."""

        def __init__(self):
            self.ring_size = 2
            self.kv_score_buffer = _ScoreBuffer(torch.zeros(8, 16, dtype=torch.bfloat16))

    def dsv4_state(name):
        return DeepSeekV4StateHostPool(pool_name=name, state_pools=[_StatePool() for _ in range(LAYERS)],
                                       num_host_pages=4 * n_pages, swa_page_size=page_size, layout=layout,
                                       pin_memory=False)

    def mamba_host():
        cap = 8
        heads = max(1, HEADS // attn_tp_size)
        temporal = torch.zeros(LAYERS, cap, heads, 4, 4, dtype=torch.float32)
        conv = tuple(torch.zeros(LAYERS, cap, heads * 4, 3, dtype=torch.bfloat16)
                     for _ in range(case.get("mambaConvBuffers", 1)))
        return MambaPoolHost(MambaStateBufferInfo(temporal=temporal, conv=conv), 4, 0, device_capacity=cap,
                             pin_memory=False, layout="page_first" if layout not in ("page_first", "page_first_direct") else layout)

    if attention in ("MHA", "HybridMambaMHA"):
        kv = mha_host("kv")
    elif attention in ("MLA", "HybridMambaMLA"):
        kv = mla_host("kv")
    elif attention == "DSV4":
        kv = LogicalHostPool(host_tokens, page_size, layout=layout)
    else:
        raise SystemExit("unknown attention %r" % attention)
    side = []
    for p in pools:
        if p == "kv":
            continue
        if p == "mamba":
            side.append((PoolName.MAMBA, mamba_host()))
        elif p == "swa" or p in ("deepseek_v4_c4", "deepseek_v4_c4_indexer", "deepseek_v4_c128"):
            side.append((PoolName(p), dsv4_paged(p)))
        elif p.endswith("_state"):
            side.append((PoolName(p), dsv4_state(p)))
        else:
            raise SystemExit("the driver has no host pool for %r" % p)
    if draft:
        for p in draft["pools"]:
            if p != "draft":
                raise SystemExit("the driver has no host pool for draft pool %r" % p)
            side.append((PoolName.DRAFT, mha_host("draft") if draft["hostPool"] == "MHA" else mla_host("draft")))
    hybrid = bool(side)
    if hybrid:
        ident = lambda i: i  # noqa: E731
        entries = [PoolEntry(name=PoolName.KV, host_pool=kv, device_pool=None, layer_mapper=ident,
                             is_primary_index_anchor=True)]
        entries += [PoolEntry(name=n, host_pool=h, device_pool=None, layer_mapper=ident) for n, h in side]
        mem_pool_host = HostPoolGroup(entries)
        controller_cls = HybridCacheController
    else:
        mem_pool_host = kv
        controller_cls = HiCacheController

    # 3. The storage config as _generate_storage_config fills it, and SGLang's backend factory.
    rank_replicated = isinstance(kv, (MLATokenToKVPoolHost, LogicalHostPool))

    def storage_config(tp, pp):
        return HiCacheStorageConfig(
            tp_rank=tp, tp_size=attn_tp_size, pp_rank=pp, pp_size=pp_size, attn_cp_rank=0, attn_cp_size=1,
            is_mla_model=rank_replicated, enable_storage_metrics=False,
            is_page_first_layout=layout == "page_first", model_name=storage_model_name(served, kv),
            tp_lcm_size=tp_lcm_size, should_split_heads=False, dp_rank=0, extra_config=dict(extra_config))

    cfg = storage_config(tp_rank, pp_rank)
    backend = StorageBackendFactory.create_backend("mooncake", cfg, kv)
    backend.register_mem_pool_host(kv)
    for name, host in side:
        backend.register_mem_host_pool_v2(host, name)
    if hasattr(backend, "on_host_pools_registered"):
        backend.on_host_pools_registered()
    log("backend %s ready (tp %d/%d, pp %d/%d) in %.1fs" % (type(backend).__name__, tp_rank, attn_tp_size, pp_rank,
                                                          pp_size, time.monotonic() - started))

    def controller(config):
        c = controller_cls.__new__(controller_cls)
        c.storage_config = config
        c.storage_backend_type = "mooncake"
        c.storage_backend = backend
        c.mem_pool_host = mem_pool_host
        c.storage_host_pool = kv
        c.page_size = page_size
        c.enable_storage = True
        c.backup_queue = queue.Queue()
        c.ack_backup_queue = queue.Queue()
        c.storage_stop_event = threading.Event()
        c.page_set_func = c._page_set_zero_copy
        return c

    # 6. SGLang's duty decision for every rank the suite asks about.
    duties = {}
    for tp, pp in case.get("dutyRanks", []):
        c = controller(storage_config(tp, pp))
        writes = [] if c.backup_skip or kv.kv_buffer is None else ["kv"]
        for name, _ in side:
            if not hybrid or c.should_backup(PoolTransfer(name=name)):
                writes.append(str(name))
        duties["%d/%d" % (tp, pp)] = {"backupSkip": bool(c.backup_skip), "writes": writes}

    # 4. Fill the host pools with random bytes and back up the pages through the controller.
    def page_objects(host, indices):
        ptrs, sizes = host.get_page_buffer_meta(indices)
        out = []
        for p, s in zip(ptrs, sizes):
            if isinstance(p, (list, tuple)):
                out.append(b"".join(ctypes.string_at(int(x), int(y)) for x, y in zip(p, s)))
            else:
                out.append(ctypes.string_at(int(p), int(s)))
        return out

    def tensors(x):
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            for y in x:
                yield from tensors(y)

    def randomize(host):
        bufs = [getattr(host, "kv_buffer", None)] + list(getattr(host, "get_hybrid_pool_buffer", lambda: [])())
        for buf in tensors(bufs):
            if buf.numel() and buf.is_contiguous():
                b = buf.view(-1).view(torch.uint8)
                b.copy_(torch.randint(0, 256, b.shape, dtype=torch.uint8))

    def alloc(host, n):
        idx = host.alloc(n)
        if idx is None:
            raise SystemExit("host pool %s could not allocate %d slots" % (type(host).__name__, n))
        return idx

    def pool_page_size(host):
        return getattr(host, "page_size", 1) or 1

    for host in [kv] + [h for _, h in side]:
        randomize(host)

    c = controller(cfg)
    worker = threading.Thread(target=c.backup_thread_func, daemon=True)
    worker.start()
    hashes, prior = [], None
    for tokens in case["pages"]:
        prior = get_hash_str(tokens, prior_hash=prior)
        hashes.append(prior)
    written = {}  # pool -> (host, source indices) of what this rank wrote
    completed = []
    prefix = None
    for i, tokens in enumerate(case["pages"]):
        host_indices = alloc(kv, page_size)
        transfers = []
        for name, host in side:
            src = SOURCE_POOL.get(str(name)) or ("swa" if str(name).endswith("_state") else None)
            if src is None:
                # A pool with its own slots; its objects are the trailing pages of the span.
                t = PoolTransfer(name=name, host_indices=alloc(host, pool_page_size(host)), keys=[hashes[i]],
                                 hit_policy=PoolHitPolicy.TRAILING_PAGES)
            else:
                t = PoolTransfer(name=name, indices_from_pool=PoolName(src),
                                 hit_policy=PoolHitPolicy.TRAILING_PAGES if src == "swa" else PoolHitPolicy.ALL_PAGES)
            transfers.append(t)
        if hybrid:
            op_id = c.write_storage(host_indices, tokens, hash_value=[hashes[i]], prefix_keys=prefix,
                                    extra_pools=transfers)
        else:
            op_id = c.write_storage(host_indices, tokens, hash_value=[hashes[i]], prefix_keys=prefix)
        op = c.ack_backup_queue.get(timeout=120)
        if op.id != op_id:
            raise SystemExit("the backup thread acknowledged operation %d, expected %d" % (op.id, op_id))
        completed.append(op.completed_tokens)
        written.setdefault("kv", []).append((kv, host_indices))
        for t, (name, host) in zip(transfers, side):
            written.setdefault(str(name), []).append((host, t.host_indices))
        prefix = (prefix or []) + [hashes[i]]
    c.storage_stop_event.set()
    worker.join(timeout=10)

    mine = duties.get("%d/%d" % (tp_rank, pp_rank))
    my_writes = mine["writes"] if mine else None

    # 5. Read back what this rank wrote, into other slots, and compare the bytes.
    readback = {}
    for pool, items in written.items():
        if my_writes is not None and pool not in my_writes:
            continue
        host = kv if pool == "kv" else dict((str(n), h) for n, h in side)[pool]
        if pool == "kv" and kv.kv_buffer is None:
            continue
        src = torch.cat([ix for _, ix in items])
        source = SOURCE_POOL.get(pool) or ("swa" if pool.endswith("_state") else None)
        slots = host if source is None else (kv if source == "kv" else dict((str(n), h) for n, h in side)[source])
        dst = alloc(slots, len(src))
        if pool == "kv":
            ok = backend.batch_get_v1(hashes, dst)
        else:
            ok = backend.batch_get_v2([PoolTransfer(name=PoolName(pool), host_indices=dst, keys=hashes)])[PoolName(pool)]
        same = all(a == b for a, b in zip(page_objects(host, src), page_objects(host, dst)))
        readback[pool] = {"ok": [bool(x) for x in ok], "bytesEqual": same,
                          "objects": len(page_objects(host, src)), "bytes": sum(len(x) for x in page_objects(host, src))}

    def exists():
        """What SGLang's own existence queries find of this rank's pages."""
        out = {}
        if kv.kv_buffer is not None:
            out["kv"] = backend.batch_exists(hashes)
        if hybrid:
            res = backend.batch_exists_v2(hashes, [
                PoolTransfer(name=n, hit_policy=PoolHitPolicy.ALL_PAGES) for n, _ in side])
            out["pages"] = res.kv_hit_pages
            for name, n in res.extra_pool_hit_pages.items():
                # The kv entry of a logical anchor (DeepSeek-V4) is assumed, not looked up.
                if name != PoolName.KV:
                    out[str(name)] = n
        return out

    send({
        "ready": True,
        "pid": os.getpid(),
        "tpRank": tp_rank, "ppRank": pp_rank,
        "pageHashes": hashes,
        "completedTokens": completed,
        "duties": duties,
        "readback": readback,
        "exists": exists(),
        "seconds": round(time.monotonic() - started, 1),
    })

    for line in cmds:
        cmd = line.strip()
        if cmd == "exists":
            send({"exists": exists()})
        elif cmd == "exit":
            break
        elif cmd:
            send({"error": "unknown command %r" % cmd})


def main():
    """Forks one process per rank of the case; relays their reports and the suite's commands.

    Importing SGLang takes most of a rank's start (about 14 s of CPU), so this process imports it
    once and forks the ranks afterwards: each rank is still a process of its own, with its own
    Mooncake client, segment and host pools, created after the fork. Each line this process prints
    is one rank's JSON answer with its "index" in the case's "ranks" list added.
    """
    started = IMPORT_START  # a rank's "seconds" count from the start of the import
    with open(sys.argv[1]) as f:
        case = json.load(f)
    # Load the page-hash extension before forking, so the ranks do not each load (or build) it.
    get_hash_str([0])
    log("imported SGLang in %.1fs" % (time.monotonic() - IMPORT_START))
    children = []
    for index, rank in enumerate(case["ranks"]):
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(cmd_w)
            os.close(out_r)
            for other in children:
                os.close(other["cmd"].fileno())
                os.close(other["out"].fileno())
            code = 0
            try:
                run_rank(case, rank, os.fdopen(out_w, "w"), os.fdopen(cmd_r), started)
            except BaseException as e:  # noqa: B902 - the rank's failure is reported, not raised
                log("rank tp%d pp%d failed: %r" % (rank["tpRank"], rank["ppRank"], e))
                import traceback

                traceback.print_exc()
                code = 1
            # Skip the native client's teardown (it takes seconds); the suite is done with the objects.
            sys.stderr.flush()
            os._exit(code)
        os.close(cmd_r)
        os.close(out_w)
        children.append({"pid": pid, "cmd": os.fdopen(cmd_w, "w"), "out": os.fdopen(out_r)})

    lock = threading.Lock()

    def relay(index, child):
        for line in child["out"]:
            obj = json.loads(line)
            obj["index"] = index
            with lock:
                print(json.dumps(obj), flush=True)

    relays = [threading.Thread(target=relay, args=(i, c), daemon=True) for i, c in enumerate(children)]
    for t in relays:
        t.start()
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "exit":
            break
        for c in children:
            try:
                c["cmd"].write(cmd + "\n")
                c["cmd"].flush()
            except BrokenPipeError:
                pass
    for c in children:
        try:
            c["cmd"].write("exit\n")
            c["cmd"].close()
        except BrokenPipeError:
            pass
    failed = 0
    for c in children:
        _, status = os.waitpid(c["pid"], 0)
        failed += status != 0
    for t in relays:
        t.join(timeout=5)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
