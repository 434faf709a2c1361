"""The tokenizer LLM.get_tokenizer() returns: the model's own (the C++ tokenizer the engine
uses), with the Hugging Face tokenizer methods vLLM users call on it."""

from __future__ import annotations

import json
from typing import Optional


class Tokenizer:
    def __init__(self, core):
        self._core = core

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; BOS first when the tokenizer adds one and add_special_tokens."""
        return self._core.encode(text, add_special_tokens)

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": self.encode(text, add_special_tokens)}

    def decode(self, token_ids, skip_special_tokens: bool = False) -> str:
        """The text of `token_ids` (transformers' default keeps special tokens)."""
        return self._core.decode(list(token_ids), skip_special_tokens)

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return self._core.id_to_piece(ids)
        return [self._core.id_to_piece(i) for i in ids]

    def apply_chat_template(
        self,
        conversation: list[dict],
        chat_template: Optional[str] = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        continue_final_message: bool = False,
        tools: Optional[list[dict]] = None,
        **kwargs,
    ):
        """transformers' apply_chat_template: the rendered text (tokenize=False) or its token
        ids, encoded without special tokens since the template writes them."""
        if tools is not None:
            kwargs["tools"] = tools
        text = self._core.render_chat(json.dumps(list(conversation)), add_generation_prompt,
                                      continue_final_message, chat_template, json.dumps(kwargs))
        return self._core.encode(text, False) if tokenize else text

    @property
    def bos_token_id(self) -> Optional[int]:
        i = self._core.bos_token_id
        return i if i >= 0 else None

    @property
    def eos_token_id(self) -> Optional[int]:
        i = self._core.eos_token_id
        return i if i >= 0 else None

    @property
    def bos_token(self) -> Optional[str]:
        return self._core.bos_token or None

    @property
    def eos_token(self) -> Optional[str]:
        return self._core.eos_token or None

    @property
    def vocab_size(self) -> int:
        return self._core.tokenizer_vocab_size

    def __len__(self) -> int:
        return self._core.tokenizer_vocab_size
