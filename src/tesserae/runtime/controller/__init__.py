"""The controller: the loop that turns the store's jobs into decisions of the scheduler core and
applies them through an executor, write-ahead, and what it knows about waiting jobs (why they wait,
their lifecycle controls, tenant queues, predicted starts)."""
