"""The outputs that read one source position at a time: hard attention, with the choice of position
summed out exactly in training, and hard or top-k attention at inference.

`att` is the model's GlobalAttention (training/model.py): its scores and its W_c (`linear_out`). Each
source position j makes its own output distribution from attn_h_j = tanh(W_c [h_j; h_t]), and the
attention weights mix them (`mix`); `mixture` weighs positions by the softmax of the scores (Wu,
Shapiro and Cotterell 2018, 0th order), `monotonic` by an alignment that never moves back (Wu and
Cotterell 2019, 1st order).

Every function here also takes a leading member axis (N, B, ...) on its tensors, with `att` and
`generator` the stacked ones of training/stacked.py: an ensemble steps its members as one.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

# Padding scores: large and finite, so a row of all padding can never make NaN.
MASKED_SCORE = -1e9


def keep_top_k(attn: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    """Hard or top-k attention at inference, per row, from the soft weights of a soft-trained model.

    top_k (B,): 0 keeps the soft weights unchanged; k >= 1 keeps the k largest weights,
    renormalised to sum to 1 (k = 1 is hard attention: one-hot on the argmax). A position
    is kept when fewer than k positions weigh strictly more, so ties at the k-th weight
    are all kept: a rule without sorting, whose tie order could differ between PyTorch
    and onnxruntime and break parity. Padding weighs exactly 0 and stays 0.
    """
    soft = top_k[:, None] == 0  # (B, 1)
    above = (attn[..., None, :] > attn[..., :, None]).sum(-1)  # (B, S) positions weighing more
    kept = attn.masked_fill((above >= top_k[:, None]) & ~soft, 0.0)  # (B, S)
    return torch.where(soft, attn, kept / kept.sum(-1, keepdim=True))  # (B, S)


def mixture(att: nn.Module, query, keys, pad_mask, top_k, generator: nn.Linear, dropout: nn.Dropout):
    """Hard attention marginalized exactly (Wu, Shapiro and Cotterell 2018): each source position
    makes its own output distribution and the attention weights mix them,

        attn_h_j = tanh(W_c [h_j; h_t])                        (B, S, H)
        log p(y) = logsumexp_j (log attn_j + log_softmax(W_g attn_h_j)_y)

    so the output comes from one position at a time rather than from a blend of them. Returns
    log_probs (B, V), feed (B, H) the attn-weighted attn_h the next step reads, and attn (B, S).
    """
    keys, w_src_h = keys.split(att.hidden_size, dim=-1)  # (B, S, H) each: see GlobalAttention.keys
    log_attn = torch.log_softmax(att.scores(query, keys, pad_mask), dim=-1)  # (B, S)
    log_attn, attn = cut(log_attn, top_k)
    log_probs, feed, _ = mix(att, log_attn, attn, query, w_src_h, generator, dropout)
    return log_probs, feed, attn


def monotonic(att: nn.Module, query, keys, pad_mask, top_k, generator: nn.Linear, dropout: nn.Dropout, y_prev, align):
    """Hard monotonic attention marginalized exactly (Wu and Cotterell 2019, 1st order): the output
    comes from one source position at a time, as in `mixture`, and that position never moves back.

        post(i)     = p(a_{t-1} = i | y_<t)      the last step's alignment, updated by the y it emitted
        T(i -> j)   = softmax_{j >= i} score(h_t, h_j)
        attn(j)     = sum_i post(i) T(i -> j)    = p(a_t = j | y_<t)
        log p(y)    = logsumexp_j (log attn_j + log p(y | a_t = j))

    Which y the last step emitted is known only now (the engine or beam search chose it), so
    the state `align` (B, S, 1 + V) carries the last step's log attn in channel 0 and its
    per-position log p(y | j) in the rest; the first step (y_prev <s>) starts from position 0.
    Returns log_probs (B, V), feed (B, H), attn (B, S) and the next align.
    """
    keys, w_src_h = keys.split(att.hidden_size, dim=-1)  # (B, S, H) each: see GlobalAttention.keys
    last_attn, last_log_p = align[..., 0], align[..., 1:]  # (B, S), (B, S, V)
    # log p(y_prev | j): the row's column of last_log_p. The initial state's log-probabilities are 0,
    # so the first step (y_prev <s>) keeps the initial alignment as it is.
    emitted = (last_log_p * F.one_hot(y_prev, last_log_p.size(-1)).to(last_log_p.dtype)[:, None, :]).sum(-1)
    post = torch.log_softmax((last_attn + emitted).masked_fill(pad_mask, MASKED_SCORE), dim=-1)  # (B, S)
    pos = torch.arange(pad_mask.size(1), device=pad_mask.device)  # from pad_mask, which every member shares
    backward = pos[None, :] < pos[:, None]  # (S_i, S_j) True where j < i: a move back
    moves = att.scores(query, keys, pad_mask)[..., None, :].masked_fill(backward, MASKED_SCORE)  # (B, S, S)
    log_attn = torch.logsumexp(post[..., None] + torch.log_softmax(moves, dim=-1), dim=-2)  # (B, S)
    log_attn, attn = cut(log_attn, top_k)
    log_probs, feed, log_p = mix(att, log_attn, attn, query, w_src_h, generator, dropout)
    return log_probs, feed, attn, torch.cat([log_attn[..., None], log_p], dim=-1)


def mix(att: nn.Module, log_attn, attn, query, w_src_h, generator: nn.Linear, dropout: nn.Dropout):
    # log_attn, attn (B, S) -> log_probs (B, V), feed (B, H), each position's log p (B, S, V).
    attn_h = att.attn_h_each(w_src_h, query)  # (B, S, H)
    log_p = torch.log_softmax(generator(dropout(attn_h)), dim=-1)  # (B, S, V)
    log_probs = torch.logsumexp(log_attn[..., None] + log_p, dim=-2)  # (B, V)
    return log_probs, (attn[..., None, :] @ attn_h).squeeze(-2), log_p


def cut(log_attn: torch.Tensor, top_k: Optional[torch.Tensor]):
    """(log attn, attn) (B, S), at inference cut to each row's top_k (see keep_top_k). A soft row keeps its
    log weights as computed: finite at padding, so are the gradients in training; a cut-off position of a
    hard or top-k row weighs 0, its log -inf, and adds nothing."""
    attn = log_attn.exp()
    if top_k is None:
        return log_attn, attn
    kept = keep_top_k(attn, top_k)
    return torch.where(top_k[:, None] == 0, log_attn, torch.log(kept)), kept
