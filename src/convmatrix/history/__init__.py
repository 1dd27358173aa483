"""The history database: every recorded run's cells and case verdicts, and what a report's red
and green mean against them (first-red, recurring, recovered, flaky). Empty face: its modules
import SQLAlchemy, which nox's own interpreter does not have."""
