# The notebook as released, nothing filled in: every test fails.
