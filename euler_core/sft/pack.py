"""Packing encoded conversations into rows of T+1 tokens, and batches of them.

Conversations are placed whole, in order, into rows of T+1 tokens (inputs are the first T, targets
the last T): a conversation that does not fit in what is left of a row starts the next row, and the
rest of a row is padding (`<|endoftext|>`, target -1). A conversation is never cropped; one longer
than T+1 tokens cannot be placed and is skipped (the caller reports how many).

Conversations packed into one row attend to the earlier ones in the row (there is no block-diagonal
mask in the attention op); each starts with `<|endoftext|>`, as documents do in pretraining.
"""

from __future__ import annotations

import numpy as np


def pack(examples: list[tuple[list[int], list[bool]]], T: int, pad_id: int):
    """(tokens (R,T+1) int32, loss mask (R,T+1) bool, skipped): rows of whole conversations."""
    width = T + 1
    rows, masks, skipped = [], [], 0
    row, mask = [], []
    for ids, train in examples:
        if len(ids) > width:
            skipped += 1
            continue
        if len(row) + len(ids) > width:
            rows.append(row)
            masks.append(mask)
            row, mask = [], []
        row = row + list(ids)
        mask = mask + list(train)
    if row:
        rows.append(row)
        masks.append(mask)
    tokens = np.full((len(rows), width), pad_id, dtype=np.int32)  # (R,T+1)
    loss = np.zeros((len(rows), width), dtype=bool)                 # (R,T+1)
    for r, (ids, train) in enumerate(zip(rows, masks)):
        tokens[r, :len(ids)] = ids
        loss[r, :len(train)] = train
    return tokens, loss, skipped


class PackedSource:
    """Batches of packed rows: `batch(index, B, T, seed)` as pretraining's TokenSource offers.

    shuffle=True (training): row positions index*B .. index*B+B-1 of an endless sequence of epochs,
    each a permutation of the rows drawn from (seed, epoch): a pure function of the index, so a
    resumed run sees the same batches. shuffle=False (validation): the rows in order, wrapping.
    """

    def __init__(self, tokens: np.ndarray, loss: np.ndarray, name: str, shuffle: bool = True):
        if len(tokens) == 0:
            raise ValueError(f"{name}: no rows (every conversation was skipped?)")
        self.tokens, self.loss, self.name, self.shuffle = tokens, loss, name, shuffle

    def __len__(self) -> int:
        return int(self.tokens.size)

    @property
    def rows(self) -> int:
        return len(self.tokens)

    @property
    def loss_tokens(self) -> int:
        return int(self.loss[:, 1:].sum())

    def batch(self, index: int, B: int, T: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """inputs, targets (B,T) int32; targets -1 where there is no loss."""
        if T != self.tokens.shape[1] - 1:
            raise ValueError(f"{self.name}: rows were packed for T={self.tokens.shape[1] - 1}, asked for T={T}")
        R = self.rows
        positions = index * B + np.arange(B)
        if self.shuffle:
            picks = np.empty(B, dtype=np.int64)
            for epoch in np.unique(positions // R):
                perm = np.random.default_rng([seed, int(epoch)]).permutation(R)
                here = positions // R == epoch
                picks[here] = perm[positions[here] % R]
        else:
            picks = positions % R
        rows, loss = self.tokens[picks], self.loss[picks]  # (B,T+1)
        return rows[:, :-1], np.where(loss[:, 1:], rows[:, 1:], -1).astype(np.int32)
