"""``python -m xpushare.cli``: the same as the ``xpushare`` console script."""

from xpushare.cli.main import main

main()
