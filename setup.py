"""The optional C extension; everything else about the package is in pyproject.toml.

``mpbroker.codec._fastscan`` (mpbroker/codec/_fastscan.c, linked with zlib) speeds up
message-set validation and decoding. It is optional: without a C compiler or zlib's
headers the build skips it with a warning and the codec runs its pure-Python loop,
which gives the same answers (tests/codec/test_fastscan.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mpbroker.codec._fastscan",
            sources=["mpbroker/codec/_fastscan.c"],
            libraries=["z"],
            optional=True,
        )
    ]
)
