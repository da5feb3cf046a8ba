"""Backends: one module per protocol behind the :class:`~ferry.backends.base.Backend` interface."""
