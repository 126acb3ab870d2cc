"""Tenants, the people who use Tollgate (users with roles) and their API tokens."""
