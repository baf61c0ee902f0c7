"""Benchmarks: the Table 5 wall clock, Table 6 speculative decoding, the GPU cost check."""
