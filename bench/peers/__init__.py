"""One small module per benchmarked system, all behind :class:`base.System`.

Each module defines the system's benchmark task (which only calls
:func:`bench.common.job.job`: one record and one Redis INCR), the idiomatic worker
command line, and how a producer enqueues one job or a batch. A module is imported both by the
bench agent (producer side) and by the system's own worker CLI, inside the
virtualenv that has that system installed.
"""
