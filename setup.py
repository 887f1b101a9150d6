"""Build hook: the native archive reader (cffi, API mode) is compiled here."""

from setuptools import setup

setup()
