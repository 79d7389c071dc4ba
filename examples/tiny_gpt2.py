"""A tiny GPT-2 with random weights for driving the ``fxrules`` command end to end (no download).

``fxrules apply algebra.fxr cleanup.fxr --model examples.tiny_gpt2:model --input 'int64[2,16]:0..1000'
--trace export --output gpt2.pt2`` (docs/cli.md) rewrites it and saves the result.
"""

from __future__ import annotations

import torch
import transformers

VOCAB = 1000


class TokensToHidden(torch.nn.Module):
    """GPT-2 from token ids to the last hidden state (one tensor: no cache, no ``ModelOutput``)."""

    def __init__(self) -> None:
        super().__init__()
        config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                         use_cache=False, attn_implementation="eager")
        self.gpt2 = transformers.GPT2Model(config)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.gpt2(input_ids=input_ids).last_hidden_state


def model() -> torch.nn.Module:
    """The model in eval mode, its weights drawn from seed 0 (the global random state is left alone)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return TokensToHidden().eval()
