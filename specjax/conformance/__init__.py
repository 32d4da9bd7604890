"""Conformance: the exactness matrix that every registered drafter kind runs (its ``KindSpec.cases``).

``cases`` builds the configurations and the tiny models they run on, ``matrix`` runs the cells
against a float64 reference, and ``command`` is ``python -m specjax.conformance``.
"""
