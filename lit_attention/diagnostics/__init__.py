"""Diagnostics: gradient flow through time (‖∂L/∂h_t‖), gradient norms, attention maps, BLEU by
length."""

from lit_attention.diagnostics.attention_maps import (attention_entropy, entropy_by_name,
                                                    heatmap_size, last_layer, save_heatmap)
from lit_attention.diagnostics.gradflow import (global_grad_norm, gradient_flow,
                                                long_sentence_sample, module_path,
                                                per_module_grad_norms, summed_cross_entropy)

__all__ = ["attention_entropy", "entropy_by_name", "global_grad_norm", "gradient_flow",
           "heatmap_size", "last_layer", "long_sentence_sample", "module_path",
           "per_module_grad_norms", "save_heatmap", "summed_cross_entropy"]
