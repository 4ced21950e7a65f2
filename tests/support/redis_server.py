"""A real redis-server on a free loopback port, for tests (never a fake).

The launcher itself is `demo.redis_launcher`, shared with the demo and the benchmarks.
"""

from demo.redis_launcher import RedisProcess, free_port, running_redis

__all__ = ["RedisProcess", "free_port", "running_redis"]
