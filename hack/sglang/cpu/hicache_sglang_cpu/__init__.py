"""CPU support of the pinned SGLang server's HiCache host pools (see plugin.py)."""
