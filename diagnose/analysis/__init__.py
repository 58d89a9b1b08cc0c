"""Analysis: turn a trace (plus the capture's samples and stack samples) into per-step breakdowns and a flat
mapping of named metrics. analyze.py builds the Analysis; trace.py loads a trace; metrics.py is the catalogue
of metric names that rules are written against (kept free of numpy, so listing rules stays light); prefetch.py
starts reading a trace before the rest is imported. This file imports nothing, so that those stay light."""
