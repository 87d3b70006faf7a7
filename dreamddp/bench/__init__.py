"""``dreamddp-bench``: the side-by-side benchmark, its reports, the simulator's accuracy and
the measurements of a lent GPU.  It drives runs through the run API a user has
(dreamddp.run.train.Run) and reads only their records; it is the top layer."""
