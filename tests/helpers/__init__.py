"""What the tests share.

Fixtures (registered in ``tests/conftest.py``), real servers and brokers, test data and models
built on the spot, and the paths of the checkout.
"""
