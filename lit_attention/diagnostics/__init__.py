"""Diagnostics: gradient flow to encoder states, gradient norms, attention maps, BLEU by length."""

from lit_attention.diagnostics.attention_maps import attention_entropy, heatmap_size, save_heatmap
from lit_attention.diagnostics.bleu_by_length import bleu_by_length, bucket_bounds
from lit_attention.diagnostics.gradflow import (global_grad_norm, gradient_flow, module_path,
                                                per_module_grad_norms, summed_cross_entropy)

__all__ = ["attention_entropy", "bleu_by_length", "bucket_bounds", "global_grad_norm",
           "gradient_flow", "heatmap_size", "module_path", "per_module_grad_norms",
           "save_heatmap", "summed_cross_entropy"]
