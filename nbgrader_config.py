"""nbgrader configuration for this repository (the course directory): see grader/settings.py."""
from grader.settings import configure

configure(get_config())  # noqa: F821 -- provided by nbgrader when it loads this file
