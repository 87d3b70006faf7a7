"""Communication layer: paced, accounted collectives and link models.

The bottom layer of dreamddp.  ``cost`` is the alpha-beta model of one ring
collective, ``links`` the link types (one module each), ``communicator`` runs
real torch.distributed collectives paced by a link, ``fake`` is an in-process
stand-in for tests.  Import the modules themselves: this package imports
nothing, so the pure parts load without torch.
"""
