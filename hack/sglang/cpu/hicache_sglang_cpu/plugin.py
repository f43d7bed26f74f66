"""A general SGLang plugin (entry point group sglang.srt.plugins) that lets SGLang 0.5.23's
HiCache host pools run on the CPU engine.

SGLang loads it with load_plugins() early in every process it starts (the server, the
scheduler, the detokenizer), before any host pool exists. It changes nothing unless the CPU
engine is on (SGLANG_USE_CPU_ENGINE=1), and then the four below, each a gap of 0.5.23 on CPU:

1. Host-pool memory. SGLang allocates a host pool with alloc_with_host_register, the default of
   pool_host.common.ALLOC_MEMORY_FUNCS, which calls cudaHostRegister (torch.cuda.cudart()) even
   when the device pool is on the CPU, so the server dies at start with "Found no NVIDIA driver".
   Here the "cpu" entry allocates with the same allocator (Mooncake's, when the storage backend
   is Mooncake, so its buffers stay registered with Mooncake) and registers nothing: the device
   pool is host memory already.
2. The direct I/O backend's transfers. pool_host.mha, pool_host.mla and memory_pool_host bind
   transfer_kv_direct, transfer_kv_per_layer_direct_pf_lf and
   transfer_kv_all_layer_direct_lf_pf only on CUDA, ROCm and XPU. Here they are bound to the
   torch versions of sgl_kernel.kvcacheio (this distribution's stand-in).

3. (Only where a prebuilt page hash is installed, as in the SGLang CPU image.) SGLang hashes every
   L3 page with a C++ extension it JIT-compiles on first use
   (mem_cache.cpp_utils.native_hash, torch.utils.cpp_extension.load: g++, ninja and the OpenSSL
   headers); an image without a compiler fails every L3 lookup ("Failed to load HiCache native
   hash extension") and serves without L3 reads. The image build compiles the same source with
   SGLang's own loader and flags and installs the result as the module hicache_hash_cpp; here
   SGLang's loader is bound to that module.

4. MLA attention on torch_native. DeepSeek's attention picks its forward method per batch from
   a registry keyed by attention backend (models.deepseek_common.attention_backend_handler);
   torch_native has no entry and takes triton's, which chooses plain MHA for a prefill without
   a cached prefix. MHA hands the backend per-head K of qk_nope + qk_rope dims, but
   torch_native attends over the KV pool, which for MLA holds the latent
   (kv_lora_rank + qk_rope dims): the first prefill fails in scaled_dot_product_attention
   ("Expected size for first two dimensions of batch2 tensor to be: [4, 32] but got:
   [4, 48]"). Here torch_native is registered to take the absorbed MLA method always, which
   attends over the latent pool as the backend expects.

The kernel I/O backend stays unsupported on CPU (its ops take raw device-pointer tables): a
server started with --hicache-io-backend kernel on CPU still fails at its first transfer, so
run it with --hicache-io-backend direct (with Mooncake, --hicache-mem-layout page_first_direct).
"""

import importlib.util
import logging
import os

logger = logging.getLogger(__name__)

# The module name SGLang's JIT build gives the page-hash extension (native_hash.py's name=).
PREBUILT_HASH_MODULE = "hicache_hash_cpp"

_HOST_POOL_MODULES = (
    "sglang.srt.mem_cache.pool_host.mha",
    "sglang.srt.mem_cache.pool_host.mla",
    "sglang.srt.mem_cache.memory_pool_host",
)

_DIRECT_OPS = (
    "transfer_kv_direct",
    "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_all_layer_direct_lf_pf",
)


def _alloc_on_cpu(dims, dtype, device, pin_memory, allocator, registration_granularity_bytes=None):
    from sglang.srt.mem_cache.pool_host import common

    del pin_memory, registration_granularity_bytes
    buffer = allocator.allocate(dims, dtype=dtype, device=device)
    # Not host-registered, so HostKVCache.destroy() must not cudaHostUnregister it (the
    # attribute SGLang's own unregistered allocations carry).
    setattr(buffer, common._CUDA_HOST_REGISTERED_RANGES_ATTR, [])
    return buffer


def register() -> None:
    if os.getenv("SGLANG_USE_CPU_ENGINE", "0") != "1":
        return
    import importlib

    from sglang.srt.mem_cache.pool_host import common

    import sgl_kernel.kvcacheio as kvcacheio

    common.ALLOC_MEMORY_FUNCS["cpu"] = _alloc_on_cpu
    for name in _HOST_POOL_MODULES:
        module = importlib.import_module(name)
        for op in _DIRECT_OPS:
            if not hasattr(module, op):
                setattr(module, op, getattr(kvcacheio, op))
    logger.info("hicache-sglang-cpu: host pools allocate unregistered memory; direct I/O transfers bound for %s", ", ".join(_HOST_POOL_MODULES))

    if importlib.util.find_spec(PREBUILT_HASH_MODULE) is not None:
        from sglang.srt.mem_cache.cpp_utils import native_hash

        def _prebuilt():
            import torch  # noqa: F401  (the extension links torch's libraries, loaded by this import)

            return importlib.import_module(PREBUILT_HASH_MODULE)

        native_hash._load_native_hash_module = _prebuilt
        logger.info("hicache-sglang-cpu: the L3 page hash is the prebuilt %s", PREBUILT_HASH_MODULE)

    from sglang.srt.models.deepseek_common import attention_backend_handler
    from sglang.srt.models.deepseek_common.attention_forward_methods.forward_methods import AttnForwardMethod

    attention_backend_handler.AttentionBackendRegistry.register("torch_native", lambda attn, forward_batch: AttnForwardMethod.MLA)
    logger.info("hicache-sglang-cpu: MLA attention on torch_native takes the absorbed method")
