"""The benchmark harness of issue 7: threadmill against its peers, on one redis-server.

Run on demand, not in the test suite: ``python -m benchmarks`` (see
``benchmarks/README.md``).
"""
