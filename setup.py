"""The optional C extensions; everything else about the package is in pyproject.toml.

``mpbroker.codec._fastscan`` (mpbroker/codec/_fastscan.c, linked with zlib) speeds up
message-set validation and decoding; ``mpbroker.records._recordscan``
(mpbroker/records/_recordscan.c) the walk over a record batch's records. Both are
optional: without a C compiler (or zlib's headers, for the first) the build skips them
with a warning and the pure-Python loops run, which give the same answers
(tests/codec/test_fastscan.py, tests/records/test_recordscan.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mpbroker.codec._fastscan",
            sources=["mpbroker/codec/_fastscan.c"],
            libraries=["z"],
            optional=True,
        ),
        Extension(
            "mpbroker.records._recordscan",
            sources=["mpbroker/records/_recordscan.c"],
            optional=True,
        ),
    ]
)
