"""Benchmarks reproducing the SSBJ paper's experiments (Sec. 4) at this machine's scale.

``datagen`` builds the synthetic (Zipf) and TPC-H data sets, ``experiments`` runs SSBJ and
MESHJOIN side by side in one process, ``plots`` draws PNGs from the JSON results and
``cli`` is the ``ssbj bench`` subcommand.
"""
