"""The report, what results mean: the model built from results (model) under the verdict policy (verdicts),
its grid, case rows, notes and bounds (grid, cases, notes, bounds), and its formats (render: json,
junit here; text, markdown, html in their own modules, imported when asked for).

The report reads results; it never runs anything and never scans a log itself (a cell's first
cause is read from the cell directory, or handed in by the cli)."""
