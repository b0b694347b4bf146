"""Analysis of recorded runs: compute only, never imports matplotlib (drawing lives in figures/)."""
