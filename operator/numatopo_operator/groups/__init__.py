"""Groups: multi-node jobs placed all or nothing inside a network domain.

`members` says which live pods form which group and what a group needs next (pure);
`indexes` are the kopf indexes the worker reads; `state` is the worker's long-lived part of
`Runtime`; `worker` advances one group at a time; `release` writes a group's plan and lifts
its scheduling gate; `status` publishes what a group is waiting for.
"""
