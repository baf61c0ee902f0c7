"""Training: dual-stream masks and loss, the TRL trainer, ``mars train`` and its data."""
