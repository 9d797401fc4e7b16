"""The optional C scanner (traceattr/io/_scan.c): JSON event arrays straight to columns.

Everything else lives in pyproject.toml. `optional=True`: without a compiler the install still succeeds
and traceattr decodes with msgspec alone (same tables, slower; `traceattr --version` says which).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("traceattr.io._scan", ["traceattr/io/_scan.c"], optional=True,
                             extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                                 "-Wno-missing-field-initializers", "-Wno-cast-function-type"])])
