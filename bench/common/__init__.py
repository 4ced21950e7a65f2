"""What every bench section starts and measures with: pinning, child processes, the nginx
backend, the proxies under test, synthetic tables, statistics and the target check."""
