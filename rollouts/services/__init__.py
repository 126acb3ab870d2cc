"""Every write of the rollouts app, a module a subject: `rollouts` (create, start and steer a
rollout, all through its one transition function), `rules` (route rules), `templates` (saved plan
templates), `replicas` (replica health from probes). Callers import from the module that holds the
function; the reads are in `rollouts.selectors`."""
