"""The ``opencheckpoint`` command line: ``entry`` (the process: what the console script and
``python -m opencheckpoint`` run, Ctrl-C answered wherever it lands), ``main`` (the parser and the
commands' dispatch), ``exit_codes``, ``output`` (rich on a terminal, plain tab-separated text in a pipe)
and ``tools`` (the ``convert``, ``export``, ``diff`` and ``ls`` commands). The top layer: it may import
any other layer, and nothing but ``__main__`` imports it. Each command imports what it needs when it
runs, so ``opencheckpoint --help`` stays fast.
"""
