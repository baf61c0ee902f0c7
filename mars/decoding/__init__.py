"""Decoding: the multi-token decoder and its caches, block diffusion, speculative decoding, text in/out."""
