"""The library's version, ``opencheckpoint.__version__``, in a module that imports nothing.

The package root, the producer record of every save and the conformance protocol command
read it from here, so none of them imports a layer above it to learn the version.

>>> import opencheckpoint
>>> opencheckpoint.__version__ == __version__
True
"""

__version__ = "0.1.0"
