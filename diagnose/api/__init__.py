"""The Python doors: diagnose.run / analyze / compare (calls.py) with their typed results (results.py), the
profiled window of a running training loop (window.py) and its framework callbacks, and the notebook magic."""
