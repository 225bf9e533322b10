"""Several words in one input: `New York`, `well-known`.

A model trained on single words (the G2P models: no space or hyphen in their alphabet) would
decode the separator as an unknown symbol and run the words together (`New York` -> N UW Z Y AO R K).
What a text-to-speech front end expects is each word converted and the outputs joined, so an input
whose separators the model cannot read is split into its words, each answered as if sent alone
(lexicon, overrides, cache and batching apply per word), and the answers joined: outputs in order,
scores summed, attention block-diagonal over the whole input (the separators' columns zero, one
end-of-sequence row at the end). Such an input gets one hypothesis: n-best over a product of
words' lists is left to the caller, who can send the words apart; max_output_len bounds each word.
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from service.domain import Decoded

SEPARATORS = re.compile(r"[\s\-]+")


def split_words(text: str, alphabet: set[str]) -> list[str] | None:
    """The words of an input (perhaps only one, as in "well-"), or None when it has no separator
    the model cannot read itself."""
    stripped = text.strip()
    separators = set("".join(SEPARATORS.findall(stripped)))
    if not separators or separators & alphabet:  # none, or the model reads them itself
        return None
    return [w for w in SEPARATORS.split(stripped) if w]


def join_words(text_tokens: list[str], words: list[list[str]], answers: list[Decoded]) -> Decoded:
    """One answer for the whole input from each word's best answer; text_tokens: the whole input's
    source tokens (separators included), words: each word's tokens, in order."""
    offsets, at = [], 0
    for tokens in words:
        while text_tokens[at:at + len(tokens)] != tokens:  # skip the separator symbols before this word
            at += 1
        offsets.append(at)
        at += len(tokens)
    out_tokens = [t for d in answers for t in d.output_tokens]
    attn = None
    if all(d.attn is not None for d in answers):
        rows = [d.attn[:len(d.output_tokens)] for d in answers]  # each word's rows without its </s>
        last, finished = answers[-1], all(d.finished for d in answers)
        T = sum(len(r) for r in rows) + (1 if finished else 0)  # one </s> row, when every word ended
        attn = np.zeros((T, len(text_tokens)), dtype=np.float32)  # (T, S) block-diagonal
        r = 0
        for block, off, d in zip(rows, offsets, answers):
            attn[r:r + len(block), off:off + block.shape[1]] = block
            r += len(block)
        if finished:
            attn[r, offsets[-1]:offsets[-1] + last.attn.shape[1]] = last.attn[-1]
    origins = {d.origin for d in answers}
    return replace(answers[0], src_tokens=list(text_tokens), output_ids=[i for d in answers for i in d.output_ids],
                   output_tokens=out_tokens, log_prob=sum(d.log_prob for d in answers), attn=attn,
                   finished=all(d.finished for d in answers), score=None, self_attn=None,
                   token_log_probs=None, origin=origins.pop() if len(origins) == 1 else "MODEL",
                   unknown_positions=tuple(off + p for off, d in zip(offsets, answers) for p in d.unknown_positions))
