"""Token counting with cl100k_base, offline.

The vocabulary ships inside the package (``convmem/data/cl100k_base.tiktoken``, the
file OpenAI publishes, verified by tiktoken's loader against its published sha256),
so counting never downloads anything. Message counts follow the OpenAI cookbook rule
for chat models: content + role + 3 per message, + 3 to prime the reply.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from importlib import resources

import tiktoken
from tiktoken.load import load_tiktoken_bpe

_CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


@cache
def encoding() -> tiktoken.Encoding:
    """The cl100k_base encoding, built from the bundled vocabulary."""
    path = resources.files("convmem").joinpath("data/cl100k_base.tiktoken")
    with resources.as_file(path) as local:
        ranks = load_tiktoken_bpe(str(local), expected_hash=_CL100K_SHA256)
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=_CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=_SPECIAL,
    )


def count_tokens(text: str) -> int:
    """Tokens in ``text``; special-token strings count as ordinary text."""
    return len(encoding().encode(text, disallowed_special=()))


def truncate_tokens(text: str, limit: int, *, ellipsis: str = "…") -> str:
    """``text`` cut to at most ``limit`` tokens (ellipsis included) on a token boundary."""
    enc = encoding()
    ids = enc.encode(text, disallowed_special=())
    if len(ids) <= limit:
        return text
    keep = max(limit - len(enc.encode(ellipsis)), 0)
    cut = enc.decode(ids[:keep])
    # A cut inside a multi-byte character decodes to U+FFFD; drop it.
    return cut.rstrip("\ufffd") + ellipsis


def count_message_tokens(messages: Iterable[tuple[str, str]]) -> int:
    """Prompt tokens of ``(role, content)`` chat messages (cookbook rule)."""
    total = 3
    for role, content in messages:
        total += 3 + count_tokens(role) + count_tokens(content)
    return total
