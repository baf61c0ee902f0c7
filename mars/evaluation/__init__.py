"""Evaluation: the lm-eval model, the tasks, ``mars eval`` and its record, the code sandbox."""
