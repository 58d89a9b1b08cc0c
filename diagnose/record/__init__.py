"""The run folder and its one owner: RunRecord (diagnose/record/run_record.py) loads and saves each file in it,
RunFolder (layout.py) names them, ranks.py merges what the ranks of a job wrote."""
