"""One router per resource: tasks, jobs, health."""
