"""The worker: the prefork pool (supervisor), the consumer loop each child runs, and what
becomes of each job (executor, outcome, finish), with the scoreboard and the retry policy."""
