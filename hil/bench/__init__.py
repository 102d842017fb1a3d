"""Benchmark orchestration behind ``hil bench``: plant step timing (:mod:`.plant`), the fixed-step plant
against a stiff reference (:mod:`.accuracy`), a loopback run under scraping (:mod:`.loop`), the round
trip through a transport (:mod:`.link`, with its controller peers in :mod:`.peers`) and the platform's
own figures (:mod:`.platform`: cyclictest, /proc probes).

The functions here measure and return plain dicts; printing them is the command line's job.
"""
