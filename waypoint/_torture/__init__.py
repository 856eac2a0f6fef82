"""The torture test: seeded scenarios across features and faults, invariants checked after each.

`scenario` makes a scenario from a seed (model replies, operator actions, faults, deploys);
`agent` is the agent those scenarios run (its tools write to a counted SQLite downstream);
`runner` plays one against a real server and worker processes; `invariants` judges the
outcome; `soak` runs many and prints the table.
"""
