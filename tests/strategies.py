"""Hypothesis generators the tests share (each section headed by what it generates)."""

from __future__ import annotations

from hypothesis import strategies as st

# --- GPUs: what nvidia-smi may name a GPU and a MIG profile (issue 37) -------------------------

# A GPU's name as nvidia-smi prints it: printable text, "NVIDIA" or not, any case and punctuation
# (the key keeps lower-case ASCII words), up to long product names.
def gpu_names() -> st.SearchStrategy[str]:
    return st.text(st.characters(min_codepoint=32, max_codepoint=0x24F), max_size=80)


def mig_profiles() -> st.SearchStrategy[str]:
    """A MIG profile in NVIDIA's naming: [<c>c.]<g>g.<m>gb, with a media-extension suffix or not."""
    compute = st.sampled_from(["", "1c.", "2c.", "3c."])
    size = st.builds(lambda g, m: f"{g}g.{m}gb", st.integers(1, 7), st.integers(5, 1999))
    suffix = st.sampled_from(["", "+me", "-me", "+gfx", "+me.all"])
    return st.builds(lambda c, s, x: c + s + x, compute, size, suffix)
