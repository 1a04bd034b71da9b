"""Pure source analysis: parsing, source edits, distribution names, mutants and decoys.
Runs nothing and knows no task.

May import: errors.
"""
