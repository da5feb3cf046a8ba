"""The transfer engine: options, planner, queue store, scheduler, per-file copy and verification."""
