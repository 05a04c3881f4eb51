"""What the controller knows of where jobs run: the ``Executor`` protocol that every executor
(``local``, ``ray``) implements, and what they share: GPU identity and a node's network for its jobs."""
