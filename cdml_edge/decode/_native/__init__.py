"""The native area resize (built by ``setup.py`` when a C compiler is present)."""
