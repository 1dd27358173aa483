"""Running: one loop over every lane's cells (orchestrate), the GPU pools and slots
(pool), preparing ahead (ahead), one cell's suite run (runner), the run options (options),
--reuse-results (reuse), the live line (progress) and each failing case's evidence (evidence).
The lanes (lanes/) sit inside: they call the runner, and orchestrate calls them.

The face imports nothing: noxfile.py imports `convmatrix.run.options` into nox's own interpreter."""
