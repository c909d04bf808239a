"""Supervised fine-tuning (SFT) on conversations: data formats (data.py), the chat template and its
special tokens (template.py), packing (pack.py), the run (run.py), and `euler sft` / `euler chat`
(cli.py). docs/sft.md walks through it."""

from .data import Conversation, SFTDataError, read_jsonl, to_messages
from .pack import PackedSource, pack
from .run import SFTConfig, chat_reply, exact_match, load_chat_model, sft
from .template import ChatTemplate, grow_vocabulary, prepare_tokenizer

__all__ = ["ChatTemplate", "Conversation", "PackedSource", "SFTConfig", "SFTDataError", "chat_reply", "exact_match",
           "grow_vocabulary", "load_chat_model", "pack", "prepare_tokenizer", "read_jsonl", "sft", "to_messages"]
