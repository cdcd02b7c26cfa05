"""Shared by every test folder under core/tests.

pytest (its default "prepend" import mode) puts the folder of each conftest.py on sys.path, so
the helper modules beside this file (fleets.py) import by name from any subfolder's tests.
"""
