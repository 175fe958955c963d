"""Elastic training under adl for the frameworks people already train with.

* :mod:`adl.integrations.hf`: ``AdaptiveTrainer``, a Hugging Face ``Trainer`` (``adl[hf]``).
* :mod:`adl.integrations.lightning`: ``AdaptiveStrategy`` and ``AdaptiveCallback`` for PyTorch
  Lightning (``adl[lightning]``).

Nothing is imported here: each submodule needs its framework, which the core install lacks.
"""
