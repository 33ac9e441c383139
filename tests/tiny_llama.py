"""The tiny Llama config the model tests build on the CPU: the shape of a Llama (grouped-query
heads, RoPE at Llama 3's theta, SwiGLU, RMSNorm), small enough for Triton's interpreter."""

TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "rope_theta": 500000.0,
    "tie_word_embeddings": True, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "hidden_act": "silu",
}  # fmt: skip
