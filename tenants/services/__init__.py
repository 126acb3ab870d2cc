"""The tenants app's writes, a module a subject: `accounts` (tenants, users, API tokens),
`gateway_keys`, `budgets`, `soft_limits` and `usage` (the usage rollups from the samples
stream). Callers import from the module that holds the function."""
