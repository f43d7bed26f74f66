"""The HiCache transfers of the "direct" I/O backend (device pool <-> host pool), in torch.

SGLang 0.5.23 binds these names in its host-pool modules (mem_cache/pool_host/mha.py, mla.py)
only on CUDA, ROCm and XPU; on CPU they are never bound and the first L1 -> L2 backup fails with
a NameError. hicache_sglang_cpu.plugin binds these in their place. Only the direct backend is
provided: its ops take tensors, while the kernel backend's take tables of raw device pointers.

Index conventions, as SGLang's callers use them (every index is a token slot):
- a device (L1) buffer is one layer, [slots, ...] (MHA: [slots, heads, head_dim]; MLA:
  [slots, 1, kv_lora_rank + rope_dim]);
- a host (L2) buffer in layer_first is one layer, [slots, ...];
- a host buffer in page_first_direct is [pages, layers, page_size, ...]: slot s of layer l is
  buffer[s // page_size, l, s % page_size].
Pages are whole: SGLang transfers page-aligned slot runs, so every index addresses one slot.
"""

from typing import Sequence

import torch


def transfer_kv_direct(
    src_layers: Sequence[torch.Tensor],
    dst_layers: Sequence[torch.Tensor],
    src_indices: torch.Tensor,
    dst_indices: torch.Tensor,
    page_size: int,
) -> None:
    """dst_layers[i][dst_indices] = src_layers[i][src_indices], buffer by buffer."""
    del page_size
    if len(src_layers) != len(dst_layers):
        raise ValueError(f"transfer_kv_direct: {len(src_layers)} source and {len(dst_layers)} destination buffers")
    src = src_indices.to(torch.long)
    dst = dst_indices.to(torch.long)
    for s, d in zip(src_layers, dst_layers):
        d[dst] = s[src]


def transfer_kv_per_layer_direct_pf_lf(
    src_ptrs: Sequence[torch.Tensor],
    dst_ptrs: Sequence[torch.Tensor],
    src_indices: torch.Tensor,
    dst_indices: torch.Tensor,
    layer_id: int,
    page_size: int,
) -> None:
    """Host page_first_direct -> device, one layer: dst_ptrs[i][dst] = src_ptrs[i][page, layer_id, offset]."""
    if len(src_ptrs) != len(dst_ptrs):
        raise ValueError(f"transfer_kv_per_layer_direct_pf_lf: {len(src_ptrs)} host and {len(dst_ptrs)} device buffers")
    src = src_indices.to(torch.long)
    dst = dst_indices.to(torch.long)
    pages, offsets = src // page_size, src % page_size
    for host, device in zip(src_ptrs, dst_ptrs):
        device[dst] = host[pages, layer_id, offsets]


def transfer_kv_all_layer_direct_lf_pf(
    src_ptrs: Sequence[torch.Tensor],
    dst_ptrs: Sequence[torch.Tensor],
    src_indices: torch.Tensor,
    dst_indices: torch.Tensor,
    page_size: int,
) -> None:
    """Device -> host page_first_direct, every layer. src_ptrs holds the device layers of each
    host buffer in turn (MHA: the K layers, then the V layers; MLA: the KV layers), so host
    buffer j, layer l comes from src_ptrs[j * layers + l]."""
    if not dst_ptrs or len(src_ptrs) % len(dst_ptrs) != 0:
        raise ValueError(f"transfer_kv_all_layer_direct_lf_pf: {len(src_ptrs)} device layers for {len(dst_ptrs)} host buffers")
    layers = len(src_ptrs) // len(dst_ptrs)
    src = src_indices.to(torch.long)
    dst = dst_indices.to(torch.long)
    pages, offsets = dst // page_size, dst % page_size
    for j, host in enumerate(dst_ptrs):
        if host.shape[1] < layers:
            raise ValueError(f"transfer_kv_all_layer_direct_lf_pf: host buffer {j} has {host.shape[1]} layers, {layers} given")
        for layer in range(layers):
            host[pages, layer, offsets] = src_ptrs[j * layers + layer][src]
