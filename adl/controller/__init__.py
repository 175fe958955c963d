"""Backend-agnostic job lifecycle and scheduling rounds (pure decisions)."""
