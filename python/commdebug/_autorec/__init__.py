"""Holds the sitecustomize.py that ``commdebug.record`` puts on PYTHONPATH."""
