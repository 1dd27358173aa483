"""Fix proof: BEFORE and AFTER paired cell by cell and judged (proof), and written as text or
markdown (render)."""
