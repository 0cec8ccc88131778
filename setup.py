# cffi_modules has no pyproject.toml key yet; this file exists only to pass it.
from setuptools import setup

setup(cffi_modules=["native/build.py:ffibuilder"])
