"""Reading and writing files safely: a directory or file written all at once, an
untrusted protobuf parsed in bounds, and YAML read the one safe way.
"""
