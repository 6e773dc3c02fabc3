"""Test helpers shared across the suite (builders, servers, sessions)."""
