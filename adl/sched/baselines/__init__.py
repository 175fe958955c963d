"""Published baseline policies behind the same interface as adl.sched.policy."""
