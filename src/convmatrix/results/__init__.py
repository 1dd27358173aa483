"""The results, what a run leaves: the results directory's one owner (rundir), reading it back (read), the
outcome vocabulary (outcomes), the requested-vs-observed stack check (stackcheck) and the failure
families a message belongs to (families).

Nothing here imports the report: a results directory is read the same way by report, prove and
the harness. The face imports nothing beyond the standard library's worth (noxfile.py uses it)."""

from convmatrix.results.read import Case, CellResult, Loaded, load

__all__ = ["Case", "CellResult", "Loaded", "load"]
