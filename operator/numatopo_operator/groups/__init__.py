"""Groups: multi-node jobs placed all or nothing inside a network domain.

`members` says which live pods form which group and what a group needs next (pure);
`indexes` reads Nodes and NetworkTopologies; `state` is the worker's long-lived part of
`Runtime`; `worker` advances one group at a time; `release` writes a group's plan and lifts
its scheduling gate; `claim_demands` counts members' ResourceClaims; `status` publishes the
NetworkTopologies' free domains.
"""
