"""The ``xpushare`` command line: the top layer, free to use every other part."""
