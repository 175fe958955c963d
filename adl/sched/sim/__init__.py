"""Trace-driven cluster simulator over the Pollux traces."""
