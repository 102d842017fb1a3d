"""Published DAS3 model data shipped with the package (provenance and checksums in README.md)."""
