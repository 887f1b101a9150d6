"""The decoders' C helpers: the area resize and the JPEG scan count.

Built by ``setup.py`` where a C compiler is present (:mod:`cdml_edge.decode.native`).
"""
