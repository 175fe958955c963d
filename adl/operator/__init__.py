"""Kubernetes backend: kopf operator for AdaptiveJob."""
