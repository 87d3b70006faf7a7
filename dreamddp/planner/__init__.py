"""``dreamddp-plan``: what an algorithm would do on a cluster you do not have yet.

One job per file: ``spec`` reads a model description or a measured profile and a cluster,
``link`` charges the two-level (hierarchical) link, ``predict`` times each recipe's plan with
the simulator and bisects the rate a target utilization needs, ``report`` writes the table and
the figure, ``table4`` recomputes Streaming DiLoCo's Table 4, ``cli`` is the command.  Like the
rest of the planning library it never imports torch.
"""
