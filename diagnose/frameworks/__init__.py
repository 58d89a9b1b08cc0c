"""Training frameworks that build the DataLoader and optimizer themselves (Hugging Face Trainer, Lightning).

Each framework is one module holding a `Framework` (framework.py; catalog.py lists them): which classes'
construction lines to record, how to tell from a call stack that its training loop is running, and how each
optimization is said in its settings (optimization id -> keyword arguments on the user's configuring call).
Capture uses `owner_of`; rules and experiments use `get` / `fix_code`. No torch import here: `diagnose analyze`
loads rules without it.
"""
