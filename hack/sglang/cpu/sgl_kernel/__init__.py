"""Pure-torch stand-ins for the sgl_kernel CPU ops that SGLang 0.5.23 imports on CPU.

SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1) imports a handful of ops from sgl_kernel at module
level, whatever the processor: the KV allocator's assign_req_to_token_pool_cpu, the KV mover's
copy_all_layer_kv_cache_cpu and six speculative-decoding ops. PyPI has no CPU build of
sgl_kernel (sglang-kernel 0.4.10 is CUDA only and fails to load without a GPU; the CPU build is
compiled from SGLang's source), so without this module the server does not start on CPU at all.
Everything else SGLang's CPU path calls in sgl_kernel is behind cpu_has_amx_support(), which is
False here (torch.ops.sgl_kernel has no convert_weight_packed), so those layers take their
torch-native forward.

Only the names below exist: any other `from sgl_kernel import X` raises ImportError exactly as
it would without the module, so no caller mistakes this for a GPU or AMX build. The ops that a
tested path runs are implemented; the speculative-decoding ones that no tested path runs raise
NotImplementedError naming the op when called, never a wrong answer.
"""

import ctypes

import torch

__version__ = "0.0.0+cpu-standin"

__all__ = [
    "assign_req_to_token_pool_cpu",
    "copy_all_layer_kv_cache_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
]


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """For request i, req_to_token[req_pool_indices[i], start[i]:end[i]] takes the next
    end[i]-start[i] entries of out_cache_loc (requests laid out one after another), as the
    Triton kernel assign_req_to_token_pool of mem_cache/allocation.py does."""
    del pool_len  # the row length of req_to_token, implied by the tensor
    starts = start_offset.tolist()
    ends = end_offset.tolist()
    rows = req_pool_indices.tolist()
    offset = 0
    for row, start, end in zip(rows, starts, ends):
        n = end - start
        if n > 0:
            req_to_token[row, start:end] = out_cache_loc[offset : offset + n].to(req_to_token.dtype)
        offset += n


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """For every buffer (data_ptrs[j], a row stride of strides[j] bytes) copies row src_loc[i]
    over row tgt_loc[i], as the Triton kernel copy_all_layer_kv_cache_tiled of
    kernels/ops/kvcache/cache_move.py does. The buffers are host memory here, so the
    addresses are process addresses."""
    pairs = list(zip(src_loc.tolist(), tgt_loc.tolist()))
    for base, stride in zip(data_ptrs.tolist(), strides.tolist()):
        for src, tgt in pairs:
            if src != tgt:
                ctypes.memmove(base + tgt * stride, base + src * stride, stride)


def _not_implemented(name: str):
    def op(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name} has no CPU stand-in in hicache-sglang-cpu: speculative decoding "
            "(EAGLE, NEXTN/MTP, DFLASH) is not supported by this CPU environment"
        )

    op.__name__ = name
    return op


assign_draft_cache_locs_contiguous_cpu = _not_implemented("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _not_implemented("assign_extend_cache_locs_cpu")
build_tree_kernel_efficient_cpu = _not_implemented("build_tree_kernel_efficient_cpu")
verify_tree_greedy_cpu = _not_implemented("verify_tree_greedy_cpu")
fill_accept_out_cache_loc_cpu = _not_implemented("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _not_implemented("fill_bonus_tokens_cpu")
