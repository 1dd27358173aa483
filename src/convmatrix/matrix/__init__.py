"""The matrix, where a run starts: a matrix file parsed (parse), expanded into cells (cells, values, knobs)
and pruned of what was never published (prune, against the stack facts in stacks.toml).

The face imports nothing beyond the standard library's worth: noxfile.py imports it into nox's
own interpreter, which has neither rich nor docker."""

from convmatrix.matrix.parse import DEFAULT_MATRIX, Matrix, default_matrix, load

__all__ = ["DEFAULT_MATRIX", "Matrix", "default_matrix", "load"]
