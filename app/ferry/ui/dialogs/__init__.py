"""Dialogs: each one is a plain QDialog with named widgets, so tests drive them as a person would."""
