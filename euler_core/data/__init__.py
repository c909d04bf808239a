"""Token data: llm.c-format shards on disk and the batch loaders that read them."""
