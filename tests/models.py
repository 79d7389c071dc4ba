"""Real models for the rule corpus: code written outside fxrules, random weights, fixed seeds, no downloads.

Every factory returns a :class:`ModelCase`: a freshly traced graph module (safe to rewrite), its example
inputs, and the eager module it was traced from.  Hugging Face models are built from tiny configs with
eager attention (so attention is written out as matmul/softmax) and traced with
``transformers.utils.fx.symbolic_trace``; ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention``
go through ``torch.export`` (aten-level graphs); the CNN is traced with ``torch.fx.symbolic_trace``.
Seeds are set inside ``torch.random.fork_rng``, so building a model leaves the global random state alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import torch
import torch.fx

nn = torch.nn
F = torch.nn.functional

SEED = 0
BATCH, SEQUENCE, VOCAB = 2, 8, 100


class ModelCase(NamedTuple):
    gm: torch.fx.GraphModule
    inputs: tuple[Any, ...]
    eager: nn.Module


def plain(value: Any) -> Any:
    """Outputs as plain containers: a Hugging Face ``ModelOutput`` becomes a ``dict`` of its set fields."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items() if item is not None}
    if isinstance(value, tuple | list):
        return type(value)(plain(item) for item in value)
    return value


def run(module: Callable[..., Any], inputs: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Any:
    with torch.no_grad():
        return plain(module(*inputs, **(kwargs or {})))


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(SEED + 1)


def _token_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and an attention mask whose second row has two padding positions."""
    ids = torch.randint(0, VOCAB, (BATCH, SEQUENCE), generator=_generator())
    mask = torch.ones(BATCH, SEQUENCE, dtype=torch.long)
    mask[1, -2:] = 0
    return ids, mask


def _hf(model_class_name: str, config_class_name: str, inputs: dict[str, torch.Tensor],
        **config: Any) -> ModelCase:
    transformers = pytest.importorskip("transformers")
    from transformers.utils.fx import symbolic_trace

    model_config = getattr(transformers, config_class_name)(attn_implementation="eager", **config)
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        model = getattr(transformers, model_class_name)(model_config).eval()
    gm = symbolic_trace(model, input_names=list(inputs))
    return ModelCase(gm, tuple(inputs.values()), model)


def bert() -> ModelCase:
    """BERT encoder (2 layers) with a padding mask: eager attention softmax(q @ k^T / sqrt(d) + mask) @ v."""
    ids, mask = _token_inputs()
    return _hf("BertModel", "BertConfig", {"input_ids": ids, "attention_mask": mask}, vocab_size=VOCAB,
               hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=64)


def gpt2() -> ModelCase:
    """GPT-2 (2 layers): NewGELU written out with tanh, causal attention through torch.where."""
    ids, _ = _token_inputs()
    return _hf("GPT2Model", "GPT2Config", {"input_ids": ids}, vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
               n_positions=64)


def t5() -> ModelCase:
    """T5 encoder-decoder (2 layers each): relative position bias, RMS norm, unscaled attention.

    Two layers, because the first layer of each stack reads the device of its attention scores to build the
    position bias (and the decoder's cross-attention their dtype too), which keeps those scores in the graph.
    """
    ids, mask = _token_inputs()
    inputs = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": ids[:, :5].clone()}
    return _hf("T5Model", "T5Config", inputs, vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
               num_decoder_layers=2, num_heads=4)


def llama() -> ModelCase:
    """Llama (2 layers, grouped-query attention): rotary embeddings, RMS norm, SiLU MLP, causal mask."""
    ids, mask = _token_inputs()
    return _hf("LlamaModel", "LlamaConfig", {"input_ids": ids, "attention_mask": mask}, vocab_size=VOCAB,
               hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64)


def vit() -> ModelCase:
    """ViT (2 layers) on 16x16 images: eager attention without a mask, softmax(q @ k^T / sqrt(d)) @ v."""
    pixels = torch.randn(BATCH, 3, 16, 16, generator=_generator())
    return _hf("ViTModel", "ViTConfig", {"pixel_values": pixels}, image_size=16, patch_size=4, num_channels=3,
               hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def exported(model: nn.Module, inputs: tuple[torch.Tensor, ...], dead_code: bool = True) -> ModelCase:
    """An aten-level graph module from ``torch.export`` (it calls a ``_guards_fn`` submodule first).

    ``dead_code=False`` erases what computes nothing returned, as a user would before rewriting: the graph of
    ``.module()`` keeps it (nn.MultiheadAttention's average of the weights a caller drops), and a rule never
    rewrites a value that something else, even dead code, reads.
    """
    gm = torch.export.export(model, inputs).module()
    assert isinstance(gm, torch.fx.GraphModule)
    if not dead_code:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return ModelCase(gm, inputs, model)


def transformer_encoder_layer() -> ModelCase:
    """``nn.TransformerEncoderLayer`` (batch first), exported: attention is already aten SDPA."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True).eval()
    return exported(layer, (torch.randn(BATCH, SEQUENCE, 32, generator=_generator()),))


def multihead_attention() -> ModelCase:
    """``nn.MultiheadAttention`` self-attention returning averaged weights, exported: bmm/softmax/bmm."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        attention = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    x = torch.randn(BATCH, SEQUENCE, 32, generator=_generator())
    return exported(attention, (x, x, x))


class SelfAttentionBlock(nn.Module):
    """``nn.MultiheadAttention`` as models use it: self-attention with a key padding mask, the weights dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, key_padding_mask=padding)[0]


def attention_block() -> ModelCase:
    """:class:`SelfAttentionBlock`, exported, dead code erased: baddbmm(mask, q * s, k^T), softmax, bmm."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        block = SelfAttentionBlock().eval()
    padding = torch.zeros(BATCH, SEQUENCE, dtype=torch.bool)
    padding[1, -2:] = True
    return exported(block, (torch.randn(BATCH, SEQUENCE, 32, generator=_generator()), padding), dead_code=False)


class ConvBNAct(nn.Module):
    """convolution -> BatchNorm -> activation, the block most CNNs are built of."""

    def __init__(self, conv: nn.Module, bn: nn.Module, act: nn.Module) -> None:
        super().__init__()
        self.conv = conv
        self.bn = bn
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class TinyCNN(nn.Module):
    """Conv2d/3d/1d + BatchNorm blocks: a stem, a depthwise block with a written-out swish, a residual
    pointwise block, a (1, 3, 3) Conv3d, a Conv1d over the flattened image, and a Linear + BatchNorm1d head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = ConvBNAct(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.depthwise_bn = nn.BatchNorm2d(8)
        self.pointwise = nn.Conv2d(8, 8, 1, bias=False)
        self.pointwise_bn = nn.BatchNorm2d(8)
        self.conv3d = nn.Conv3d(8, 8, (1, 3, 3), padding=(0, 1, 1))
        self.bn3d = nn.BatchNorm3d(8)
        self.conv1d = ConvBNAct(nn.Conv1d(8, 16, 3, padding=1, bias=False), nn.BatchNorm1d(16), nn.GELU())
        self.dropout = nn.Dropout(0.1)
        self.fc = nn.Linear(16, 10)
        self.fc_bn = nn.BatchNorm1d(10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.depthwise_bn(self.depthwise(x))
        y = y * torch.sigmoid(y)
        x = torch.relu(self.pointwise_bn(self.pointwise(y)) + x)
        v = F.relu(self.bn3d(self.conv3d(x.unsqueeze(2)))).squeeze(2)
        s = self.conv1d(v.flatten(2))
        return self.fc_bn(self.fc(self.dropout(s.mean(-1))))


def cnn() -> ModelCase:
    """:class:`TinyCNN` in eval mode, every BatchNorm with random running statistics and affine parameters."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        model = TinyCNN()
        for module in model.modules():
            if isinstance(module, nn.BatchNorm1d | nn.BatchNorm2d | nn.BatchNorm3d):
                module.running_mean.uniform_(-1, 1)
                module.running_var.uniform_(0.5, 2.0)
                nn.init.uniform_(module.weight, 0.5, 1.5)
                nn.init.uniform_(module.bias, -0.5, 0.5)
    model.eval()
    inputs = (torch.randn(BATCH, 3, 8, 8, generator=_generator()),)
    return ModelCase(torch.fx.symbolic_trace(model), inputs, model)


#: Every model of the corpus by name.
MODELS: dict[str, Callable[[], ModelCase]] = {
    "bert": bert,
    "gpt2": gpt2,
    "t5": t5,
    "llama": llama,
    "vit": vit,
    "transformer_encoder_layer": transformer_encoder_layer,
    "multihead_attention": multihead_attention,
    "cnn": cnn,
}

#: Models beside the corpus, for the transformer rules' own tests and the benchmark.
BLOCKS: dict[str, Callable[[], ModelCase]] = {
    "attention_block": attention_block,
}
