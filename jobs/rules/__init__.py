"""Kafka's rules as pure code: topic configs, planners, the offset map, the cleaner, transactions.

Nothing here imports Spark, storage or argparse (a contract in the test run checks it): every function
is a function of its arguments, time included."""
