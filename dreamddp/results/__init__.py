"""Results tools: run records -> compact copies, speedup tables, the paper's figures.

collect (find records, compact them), tables (speedup table, CSV/Markdown),
figures (matplotlib PNGs), scheduler (scheduler vs optimum on measured
profiles), wandb_table (the table as a W&B Table), cli (``python -m dreamddp.results``).
"""
