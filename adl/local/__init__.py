"""Embedded single-machine backend: daemon, SQLite store, worker processes."""
