"""HTTP service for workers: hints, rendezvous, health, metrics."""
