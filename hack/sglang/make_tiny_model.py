"""Makes a tiny checkpoint with random weights that the pinned SGLang server loads on CPU.

Nothing is downloaded: the configuration is built with transformers' own config classes, the
weights are drawn from a seeded generator, and the tokenizer is a word-level tokenizer built with
the tokenizers library over a made-up vocabulary ("w0" .. "w<N>"), saved as tokenizer.json with
its transformers wrapper. The result is a real checkpoint directory (config.json,
model.safetensors, tokenizer files, generation_config.json), loadable by
AutoModelForCausalLM.from_pretrained and by SGLang's model loader alike.

    python make_tiny_model.py --arch qwen3 OUT_DIR
    python make_tiny_model.py --arch deepseek-v3 OUT_DIR     # MLA, with one NextN (MTP) layer

The weights are drawn with a larger spread than transformers' default initialisation
(--init-std, default 0.25), so that a greedy continuation depends on the whole context: with the
default 0.02 a random model repeats one token whatever it reads, and a test that compares the
outputs of a cached and an uncached run would then prove nothing.

The same seed and arguments give the same bytes, so a test can make its model afresh.
"""

import argparse
import json
import os
import sys

import torch

VOCAB = 512  # words w0 .. w{VOCAB-4}, plus three special tokens


def make_tokenizer(out_dir: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<bos>", "<eos>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for i in range(VOCAB - len(specials)):
        vocab[f"w{i}"] = len(vocab)
    vocab["<unk>"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=4096,
    )
    fast.save_pretrained(out_dir)


def qwen3_config():
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=VOCAB + 1,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        dtype="bfloat16",
    )


def deepseek_v3_config():
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        vocab_size=VOCAB + 1,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        # The first layer dense, the second a small MoE, as in the real model (first_k_dense_replace).
        first_k_dense_replace=1,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        routed_scaling_factor=1.0,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=16,
        v_head_dim=16,
        max_position_embeddings=4096,
        # YaRN, as the real model: SGLang's CPU rotary embedding for MLA is DeepSeek's YaRN
        # only (layers/rotary_embedding/factory.py, get_rope_cpu: "Only deepseek_yarn is
        # supported for CPU"). A factor of 1 leaves the positions unscaled.
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 1.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        dtype="bfloat16",
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir")
    p.add_argument("--arch", choices=["qwen3", "deepseek-v3"], default="qwen3")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--init-std", type=float, default=0.25)
    args = p.parse_args()

    from transformers import AutoModelForCausalLM, GenerationConfig

    torch.manual_seed(args.seed)
    if args.arch == "qwen3":
        config = qwen3_config()
    else:
        config = deepseek_v3_config()
        # One NextN (MTP) draft layer, stored as DeepSeek-V3 stores it: model.layers.<N> after
        # the target's layers, loaded by SGLang's DeepseekV3ForCausalLMNextN.
        config.num_nextn_predict_layers = 1
        # Fields of DeepSeek-V3's own config.json that transformers' class does not define and
        # SGLang's deepseek_v2.py reads.
        config.moe_layer_freq = 1
        config.topk_method = "noaux_tc"
        config.scoring_func = "sigmoid"
        config.ep_size = 1
    config.initializer_range = args.init_std
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    gen = torch.Generator().manual_seed(args.seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight") or "layernorm" in name:
                param.fill_(1.0)
            elif param.dim() >= 2:
                param.copy_(torch.randn(param.shape, generator=gen) * args.init_std)
            else:
                param.zero_()
    model = model.to(torch.bfloat16)
    os.makedirs(args.out_dir, exist_ok=True)
    state = model.state_dict()
    if args.arch == "deepseek-v3":
        state.update(nextn_layer_state(config, gen, args.init_std))
    params = sum(v.numel() for v in state.values())
    model.save_pretrained(args.out_dir, state_dict=state, safe_serialization=True)
    GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0, do_sample=False).save_pretrained(args.out_dir)
    make_tokenizer(args.out_dir)
    with open(os.path.join(args.out_dir, "config.json")) as f:
        saved = json.load(f)
    print(json.dumps({"dir": args.out_dir, "arch": saved["architectures"], "params": params}))
    return 0


def nextn_layer_state(config, gen, std):
    """The weights of DeepSeek-V3's NextN layer at index num_hidden_layers: a decoder layer (MoE,
    like every layer past first_k_dense_replace) plus enorm, hnorm, eh_proj and shared_head.norm.
    transformers' DeepseekV3ForCausalLM has no such layer, so it is built from a copy of the last
    decoder layer's shapes."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    one = DeepseekV3Config(**{**config.to_dict(), "num_hidden_layers": 1, "first_k_dense_replace": 0})
    layer = DeepseekV3ForCausalLM(one).model.layers[0]
    n = config.num_hidden_layers
    out = {}
    for name, t in layer.state_dict().items():
        if t.dtype.is_floating_point and t.dim() >= 2:
            v = torch.randn(t.shape, generator=gen) * std
        elif name.endswith("norm.weight") or "layernorm" in name:
            v = torch.ones(t.shape)
        else:
            v = torch.zeros(t.shape, dtype=t.dtype if t.dtype.is_floating_point else torch.float32)
        out[f"model.layers.{n}.{name}"] = v.to(torch.bfloat16)
    h = config.hidden_size
    out[f"model.layers.{n}.enorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    out[f"model.layers.{n}.hnorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    out[f"model.layers.{n}.eh_proj.weight"] = (torch.randn(h, 2 * h, generator=gen) * std).to(torch.bfloat16)
    out[f"model.layers.{n}.shared_head.norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    return out


if __name__ == "__main__":
    sys.exit(main())
