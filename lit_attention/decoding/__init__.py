"""Decoding on the model protocols: greedy and beam search (seq2seq), sampling (language models)."""

from lit_attention.decoding.beam import beam_search, gnmt_length_penalty
from lit_attention.decoding.greedy import greedy_decode, max_output_lengths
from lit_attention.decoding.sampling import next_token, sample

__all__ = ["beam_search", "gnmt_length_penalty", "greedy_decode", "max_output_lengths",
           "next_token", "sample"]
