"""Analysis: analyzers that turn a trace (read by diagnose.trace, whose surface is all they import) plus the
capture's samples and stack samples into per-step breakdowns and a flat mapping of named metrics. analyze.py builds
the Analysis; metrics.py is the catalogue of metric names that rules are written against (kept free of numpy, so
listing rules stays light). This file imports nothing, so that it stays light."""
