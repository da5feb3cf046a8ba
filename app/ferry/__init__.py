"""Ferry: move research data between local disk, SSH hosts, S3 buckets and Globus collections.

The engine (``ferry.core``, ``ferry.backends``, ``ferry.transfers``, ``ferry.credentials``,
``ferry.cli``, ``ferry.api``) never imports Qt, so the same code runs headless from ``ferry``.
"""

__version__ = "0.1.0"
