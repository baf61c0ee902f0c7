"""MARS: multi-token generation for autoregressive models (arXiv 2604.07023), as a TRL trainer and a decoder.

    from mars import MARSConfig, MARSTrainer, generate

:class:`MARSConfig` (TRL's ``SFTConfig`` plus the MARS fields), :class:`MARSTrainer` (an ``SFTTrainer`` with the
dual-stream loss) and :func:`generate` (chat prompts in, text and tokens per forward out, with the window the
checkpoint was trained with). The pipeline (``snakemake``, the ``mars`` command) is built on the same three.
"""

__all__ = ["MARSConfig", "MARSTrainer", "generate"]


def __getattr__(name: str):
    # Loaded on first use: the pipeline's light modules (mars.pipeline.config, read by the Snakefile) must not import
    # TRL.
    if name in ("MARSConfig", "MARSTrainer"):
        from mars.training import trainer

        return getattr(trainer, name)
    if name == "generate":
        from mars.decoding.generation import mars_generate

        return mars_generate
    raise AttributeError(f"module 'mars' has no attribute {name!r}")
