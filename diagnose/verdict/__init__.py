"""Verdict stage: what the analysis, the rules' findings and any experiments add up to for the user (diagnosis.py),
each finding's prediction against what its fixes measured (predictions.py), what the run costs in time, energy and
money (run_cost.py, money.py), whether compiling pays (compile_cost.py), and the statistics that decide an
experiment's verdict (stats.py). `diagnose analyze` uses it without entering experiments/."""
