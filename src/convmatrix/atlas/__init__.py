"""The public atlas (docs/atlas.md): a fleet's outcomes exported as a portable bundle
(`convmatrix export`), and many fleets' bundles merged into a static site (`convmatrix atlas`).
Above report/, history/ and prove/ in the import graph: a bundle carries the one verdict, and the
site writes each failing case's repro with prove/repro.py."""
