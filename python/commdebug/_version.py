"""The project's version: the same number as meson.build's project version
(tests/recorder/test_trace.py checks that they agree)."""

__version__ = "0.2.0"
