"""Pipeline steps: one module per step, each idempotent (see components/pipeline/workspace.py), declared
with what it reads and returns in components/pipeline/step_table.py."""
