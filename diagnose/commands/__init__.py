"""The commands: what `diagnose run`, `analyze`, `report`, `capture`, `rules` and `compare` do, one module each,
kept apart from click's option parsing (cli.py). pipeline.py runs the stages in order for them."""
