"""``python -m adl.operator``."""

from adl.operator.main import main

main()
