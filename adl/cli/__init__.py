"""The adl command-line interface."""
