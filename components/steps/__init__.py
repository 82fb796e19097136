"""Pipeline steps: one module per step, each idempotent (see components/workspace.py), declared
with what it reads and returns in components/step_table.py."""
