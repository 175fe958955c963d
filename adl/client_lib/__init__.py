"""In-job PyTorch library (the only part of adl that imports torch)."""
