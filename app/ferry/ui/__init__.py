"""The PySide6 desktop window: a thin layer over the engine (no transfer logic lives here).

``bridge.py`` is the one place where worker threads meet Qt; everything else runs on the UI
thread and hands slow work (listing, connecting, job creation, store reads) to the bridge.
"""
