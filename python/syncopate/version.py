"""The package's version, in a layer-0 module of its own: ``syncopate-opt`` (the IR layer) prints
it without importing ``syncopate/__init__.py``, whose lazy attributes reach the compiler and the
runtime."""

__version__ = "0.1.0"
