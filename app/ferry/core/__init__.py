"""Shared, Qt-free building blocks: errors, addresses, hashing, cancellation, progress, units."""
